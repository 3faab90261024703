//! UD datagrams between two QPs on loopback: an address handle per
//! destination, the remote QPN and Q_Key per send, and on receive the
//! 40-byte GRH area in front of the data (read at offset 40, not 0).
//!
//! `cargo run -p softroce --example ud_exchange`

mod common;

use std::time::Duration;

use softroce::{
    AccessFlags, Context, Options, Payload, QpInit, QpType, RecvWr, SendFlags, SendWr, UdDest, Wc, WcFlags, WcOpcode,
    WcStatus, WrOpcode,
};

const QKEY: u32 = 0x1111_1111;

fn main() -> Result<(), softroce::Error> {
    let open = |last| -> Result<_, softroce::Error> {
        let ctx = Context::open_with(&common::loopback_device(last), Options::from_env()?)?;
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(16, None)?;
        let mr = pd.reg_mr(8192, AccessFlags::LOCAL_WRITE)?;
        let qp = pd.create_qp(QpInit::rc(&cq, &cq, 16).with_type(QpType::Ud))?;
        // UD: INIT (Q_Key) -> RTR -> RTS; the "remote" is ignored.
        qp.connect(0, &qp.endpoint(0))?;
        Ok((ctx, pd, cq, mr, qp))
    };
    let (_ca, pda, cqa, mra, qpa) = open(4)?;
    let (cb, _pdb, cqb, mrb, qpb) = open(5)?;
    let ah = pda.create_ah(cb.device().addr)?;
    let mut wc = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 1];
    for (i, msg) in ["hello", "over", "UD"].iter().enumerate() {
        let r = [mrb.sge(0, 40 + 4096)];
        qpb.post_recv(&RecvWr { wr_id: i as u64, sg_list: &r })?;
        mra.write(0, msg.as_bytes())?;
        let s = [mra.sge(0, msg.len() as u32)];
        let mut wr = SendWr::new(i as u64, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&s));
        wr.ud = Some(UdDest { ah: ah.handle(), remote_qpn: qpb.qpn(), remote_qkey: QKEY });
        qpa.post_send(&wr)?;
        assert_eq!(cqa.wait(&mut wc, Duration::from_secs(5))?, 1);
        assert_eq!(cqb.wait(&mut wc, Duration::from_secs(5))?, 1);
        let w = wc[0];
        assert_eq!(w.status, WcStatus::Success);
        assert!(w.wc_flags.contains(WcFlags::GRH));
        let data = mrb.to_vec(40, w.byte_len as usize - 40)?;
        let grh = mrb.to_vec(0, 40)?;
        println!(
            "datagram {i} from QP {:#x} at {}.{}.{}.{}: {:?} ({} bytes incl. the 40-byte GRH)",
            w.src_qp,
            grh[32],
            grh[33],
            grh[34],
            grh[35],
            String::from_utf8_lossy(&data),
            w.byte_len
        );
    }
    Ok(())
}
