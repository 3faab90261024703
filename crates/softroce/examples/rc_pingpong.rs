//! An RC ping-pong, as rdma-core's `ibv_rc_pingpong` does it: each side
//! posts a receive, one sends, the other answers when its receive
//! completes. Both ends run here in one process on two loopback
//! addresses; each has its own device, socket and driver thread.
//!
//! `cargo run --release -p softroce --example rc_pingpong -- [SIZE] [ITERS]`

mod common;

use std::time::{Duration, Instant};

use softroce::{
    AccessFlags, Context, Cq, Mr, Options, Payload, Qp, QpInit, RecvWr, SendFlags, SendWr, Wc, WcOpcode, WcStatus,
    WrOpcode,
};

struct Side {
    _ctx: Context,
    cq: Cq,
    qp: Qp,
    mr: Mr,
}

fn side(last: u8, size: usize) -> Result<Side, softroce::Error> {
    let ctx = Context::open_with(&common::loopback_device(last), Options::from_env()?)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(32, None)?;
    let mr = pd.reg_mr(size.max(1), AccessFlags::LOCAL_WRITE)?;
    let qp = pd.create_qp(QpInit::rc(&cq, &cq, 16))?;
    Ok(Side { _ctx: ctx, cq, qp, mr })
}

fn post_recv(s: &Side, size: usize) -> Result<(), softroce::Error> {
    let sge = [s.mr.sge(0, size as u32)];
    s.qp.post_recv(&RecvWr { wr_id: 1, sg_list: &sge })
}

fn send(s: &Side, size: usize) -> Result<(), softroce::Error> {
    let sge = [s.mr.sge(0, size as u32)];
    s.qp.post_send(&SendWr::new(2, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&sge)))
}

/// Waits until `s` has seen `recvs` receive and `sends` send completions in
/// all (completions of either kind may come in any order).
fn wait(s: &Side, done: &mut (usize, usize), recvs: usize, sends: usize) -> Result<(), softroce::Error> {
    let mut wc = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 4];
    while done.0 < recvs || done.1 < sends {
        let k = s.cq.wait(&mut wc, Duration::from_secs(10))?;
        assert!(k > 0, "no completion within 10 s");
        for w in &wc[..k] {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            if w.opcode == WcOpcode::Recv {
                done.0 += 1;
            } else {
                done.1 += 1;
            }
        }
    }
    Ok(())
}

fn main() -> Result<(), softroce::Error> {
    let mut args = std::env::args().skip(1);
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(4096);
    let iters: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let (a, b) = (side(2, size)?, side(3, size)?);
    // The out-of-band exchange rdma-core does over TCP: QPN, PSN and GID.
    let (ea, eb) = (a.qp.endpoint(0x1234), b.qp.endpoint(0x5678));
    println!("  local address:  QPN {:#08x}, PSN {:#08x}, GID {}", ea.qpn, ea.psn, ea.gid);
    println!("  remote address: QPN {:#08x}, PSN {:#08x}, GID {}", eb.qpn, eb.psn, eb.gid);
    a.qp.connect(ea.psn, &eb)?;
    b.qp.connect(eb.psn, &ea)?;
    // Receives are posted ahead, as rdma-core's ping-pong keeps rx_depth of
    // them: a SEND that finds none is answered with an RNR NAK and retried
    // only after the responder's RNR timer (0.64 ms here).
    for _ in 0..8 {
        post_recv(&a, size)?;
        post_recv(&b, size)?;
    }
    let b_thread = std::thread::spawn(move || -> Result<(), softroce::Error> {
        let mut done = (0, 0);
        for i in 1..=iters {
            wait(&b, &mut done, i, i - 1)?;
            post_recv(&b, size)?;
            send(&b, size)?;
        }
        wait(&b, &mut done, iters, iters)
    });
    let t0 = Instant::now();
    let mut done = (0, 0);
    for i in 1..=iters {
        send(&a, size)?;
        wait(&a, &mut done, i, i)?;
        post_recv(&a, size)?;
    }
    let secs = t0.elapsed().as_secs_f64();
    b_thread.join().expect("the responder thread")?;
    let bytes = 2 * size * iters;
    println!("{bytes} bytes in {secs:.2} seconds = {:.2} Mbit/sec", bytes as f64 * 8.0 / secs / 1e6);
    println!("{iters} iters in {secs:.2} seconds = {:.2} usec/iter", secs * 1e6 / iters as f64);
    Ok(())
}
