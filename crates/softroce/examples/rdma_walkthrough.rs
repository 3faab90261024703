//! One-sided RDMA step by step: RDMA WRITE into the peer's memory, RDMA
//! READ back, FETCH_AND_ADD and COMPARE_AND_SWAP on a peer counter, WRITE
//! with immediate (which consumes a receive at the peer), and what a bad
//! R_Key does (REMOTE_ACCESS_ERR, and the QP goes to ERR).
//!
//! `cargo run -p softroce --example rdma_walkthrough`

mod common;

use std::time::Duration;

use softroce::{
    AccessFlags, Context, Cq, Options, Payload, QpInit, RecvWr, SendFlags, SendWr, Wc, WcOpcode, WcStatus, WrOpcode,
};

fn done(cq: &Cq, what: &str) -> Result<Wc, softroce::Error> {
    let mut wc = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 1];
    assert_eq!(cq.wait(&mut wc, Duration::from_secs(5))?, 1, "{what}: no completion");
    println!("{what:<36} -> {:?} {:?} byte_len={}", wc[0].opcode, wc[0].status, wc[0].byte_len);
    Ok(wc[0])
}

fn main() -> Result<(), softroce::Error> {
    let access =
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    let open = |last| -> Result<_, softroce::Error> {
        let ctx = Context::open_with(&common::loopback_device(last), Options::from_env()?)?;
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(16, None)?;
        let mr = pd.reg_mr(1 << 16, access)?;
        let qp = pd.create_qp(QpInit::rc(&cq, &cq, 16))?;
        Ok((ctx, pd, cq, mr, qp))
    };
    let (_ca, _pa, cqa, a, qpa) = open(6)?;
    let (_cb, _pb, cqb, b, qpb) = open(7)?;
    qpa.connect(1, &qpb.endpoint(2))?;
    qpb.connect(2, &qpa.endpoint(1))?;
    // What B tells A out of band: its buffer's address and R_Key.
    let (remote, rkey) = (b.addr(), b.rkey());

    a.write(0, b"written by RDMA WRITE")?;
    let s = [a.sge(0, 21)];
    let mut wr = SendWr::new(1, WrOpcode::RdmaWrite, SendFlags::SIGNALED, Payload::Sges(&s));
    (wr.remote_addr, wr.rkey) = (remote + 100, rkey);
    qpa.post_send(&wr)?;
    done(&cqa, "RDMA WRITE 21 bytes to B+100")?;
    println!("  B+100 now holds {:?}", String::from_utf8_lossy(&b.to_vec(100, 21)?));

    let r = [a.sge(1000, 21)];
    let mut wr = SendWr::new(2, WrOpcode::RdmaRead, SendFlags::SIGNALED, Payload::Sges(&r));
    (wr.remote_addr, wr.rkey) = (remote + 100, rkey);
    qpa.post_send(&wr)?;
    done(&cqa, "RDMA READ 21 bytes from B+100")?;
    println!("  A+1000 now holds {:?}", String::from_utf8_lossy(&a.to_vec(1000, 21)?));

    b.write(4096, &41u64.to_ne_bytes())?;
    let r = [a.sge(2000, 8)];
    let mut wr = SendWr::new(3, WrOpcode::AtomicFetchAndAdd, SendFlags::SIGNALED, Payload::Sges(&r));
    (wr.remote_addr, wr.rkey, wr.compare_add) = (remote + 4096, rkey, 1);
    qpa.post_send(&wr)?;
    done(&cqa, "FETCH_AND_ADD +1 on B's counter")?;
    let old = u64::from_ne_bytes(a.to_vec(2000, 8)?.try_into().unwrap());
    let now = u64::from_ne_bytes(b.to_vec(4096, 8)?.try_into().unwrap());
    println!("  returned {old}, counter now {now}");

    let mut wr = SendWr::new(4, WrOpcode::AtomicCmpAndSwp, SendFlags::SIGNALED, Payload::Sges(&r));
    (wr.remote_addr, wr.rkey, wr.compare_add, wr.swap) = (remote + 4096, rkey, 42, 1000);
    qpa.post_send(&wr)?;
    done(&cqa, "COMPARE_AND_SWAP 42 -> 1000")?;
    println!(
        "  returned {}, counter now {}",
        u64::from_ne_bytes(a.to_vec(2000, 8)?.try_into().unwrap()),
        u64::from_ne_bytes(b.to_vec(4096, 8)?.try_into().unwrap())
    );

    qpb.post_recv(&RecvWr { wr_id: 9, sg_list: &[] })?;
    let mut wr = SendWr::new(5, WrOpcode::RdmaWriteWithImm, SendFlags::SIGNALED, Payload::Sges(&s));
    (wr.remote_addr, wr.rkey, wr.imm_data) = (remote + 200, rkey, 0xfeed);
    qpa.post_send(&wr)?;
    done(&cqa, "RDMA WRITE with immediate")?;
    let w = done(&cqb, "  ... at B, a receive completes")?;
    println!("  immediate data {:#x}", w.imm_data);

    let mut wr = SendWr::new(6, WrOpcode::RdmaWrite, SendFlags::SIGNALED, Payload::Sges(&s));
    (wr.remote_addr, wr.rkey) = (remote, rkey ^ 0x55);
    qpa.post_send(&wr)?;
    done(&cqa, "RDMA WRITE with a wrong R_Key")?;
    println!("  A's QP is now {:?}", qpa.state());
    Ok(())
}
