//! An async server on tokio (feature `tokio`): it awaits completions on a
//! CQ whose completion channel is registered with tokio's reactor, and
//! answers each request SEND with a reply SEND. A client on another
//! loopback address sends a few requests.
//!
//! `cargo run -p softroce --features tokio --example async_server`

mod common;

use softroce::{
    AccessFlags, AsyncCq, Context, Options, Payload, QpInit, RecvWr, SendFlags, SendWr, Wc, WcOpcode, WcStatus,
    WrOpcode,
};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), softroce::Error> {
    let open = |last| -> Result<_, softroce::Error> {
        let ctx = Context::open_with(&common::loopback_device(last), Options::from_env()?)?;
        let pd = ctx.alloc_pd()?;
        let ch = ctx.create_comp_channel()?;
        let cq = ctx.create_cq(16, Some(&ch))?;
        let mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE)?;
        let qp = pd.create_qp(QpInit::rc(&cq, &cq, 16))?;
        Ok((ctx, pd, AsyncCq::new(cq, ch)?, mr, qp))
    };
    let (_cs, _ps, server_cq, smr, sqp) = open(8)?;
    let (_cc, _pc, client_cq, cmr, cqp) = open(9)?;
    sqp.connect(1, &cqp.endpoint(2))?;
    cqp.connect(2, &sqp.endpoint(1))?;

    let server = async {
        let mut wc = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 4];
        for i in 0..3u64 {
            let r = [smr.sge(0, 1024)];
            sqp.post_recv(&RecvWr { wr_id: i, sg_list: &r })?;
            loop {
                let n = server_cq.next(&mut wc).await?;
                if wc[..n].iter().any(|w| w.opcode == WcOpcode::Recv) {
                    break;
                }
            }
            let req = smr.to_vec(0, 5)?;
            println!("server: request {:?}", String::from_utf8_lossy(&req));
            smr.write(1024, format!("re:{}", String::from_utf8_lossy(&req)).as_bytes())?;
            let s = [smr.sge(1024, 8)];
            sqp.post_send(&SendWr::new(100 + i, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&s)))?;
        }
        Ok::<(), softroce::Error>(())
    };
    let client = async {
        let mut wc = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 4];
        for i in 0..3u64 {
            let r = [cmr.sge(1024, 1024)];
            cqp.post_recv(&RecvWr { wr_id: i, sg_list: &r })?;
            cmr.write(0, format!("req {i}").as_bytes())?;
            let s = [cmr.sge(0, 5)];
            cqp.post_send(&SendWr::new(i, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&s)))?;
            let mut got_reply = false;
            while !got_reply {
                let n = client_cq.next(&mut wc).await?;
                got_reply = wc[..n].iter().any(|w| w.opcode == WcOpcode::Recv);
            }
            println!("client: reply {:?}", String::from_utf8_lossy(&cmr.to_vec(1024, 8)?));
        }
        Ok::<(), softroce::Error>(())
    };
    let (s, c) = tokio::join!(server, client);
    s?;
    c
}
