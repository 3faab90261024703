//! `AsyncCq` on tokio (feature `tokio`): completions are awaited through the
//! completion channel's fd, and a wait with nothing to complete stays pending.
#![cfg(feature = "tokio")]

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use softroce::config::DeviceInfo;
use softroce::{
    AccessFlags, AsyncCq, Context, Options, Payload, QpInit, RecvWr, SendFlags, SendWr, Wc, WcOpcode, WcStatus,
    WrOpcode,
};

fn device(last: u8) -> DeviceInfo {
    DeviceInfo::on_address(format!("a{last}"), IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))).unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn completions_are_awaited_through_the_channel_fd() {
    let open = |last| {
        let ctx = Context::open_with(&device(last), Options::default()).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let ch = ctx.create_comp_channel().unwrap();
        let cq = ctx.create_cq(16, Some(&ch)).unwrap();
        let mr = pd.reg_mr(8192, AccessFlags::LOCAL_WRITE).unwrap();
        let qp = pd.create_qp(QpInit::rc(&cq, &cq, 16)).unwrap();
        (ctx, pd, AsyncCq::new(cq, ch).unwrap(), mr, qp)
    };
    let (_ca, _pa, acq, amr, aqp) = open(41);
    let (_cb, _pb, bcq, bmr, bqp) = open(42);
    aqp.connect(1, &bqp.endpoint(2)).unwrap();
    bqp.connect(2, &aqp.endpoint(1)).unwrap();
    let mut wc = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 4];
    // Nothing posted: the wait stays pending.
    let idle = tokio::time::timeout(Duration::from_millis(100), bcq.next(&mut wc)).await;
    assert!(idle.is_err(), "no completion, no wake-up");
    for i in 0..20u64 {
        let r = [bmr.sge(0, 4096)];
        bqp.post_recv(&RecvWr { wr_id: i, sg_list: &r }).unwrap();
        amr.write(0, &i.to_ne_bytes()).unwrap();
        let s = [amr.sge(0, 8)];
        aqp.post_send(&SendWr::new(i, WrOpcode::Send, SendFlags::SIGNALED, Payload::Sges(&s))).unwrap();
        let n = tokio::time::timeout(Duration::from_secs(10), bcq.next(&mut wc)).await.unwrap().unwrap();
        assert_eq!((n, wc[0].wr_id, wc[0].status, wc[0].byte_len), (1, i, WcStatus::Success, 8));
        assert_eq!(bmr.to_vec(0, 8).unwrap(), i.to_ne_bytes());
        let n = tokio::time::timeout(Duration::from_secs(10), acq.next(&mut wc)).await.unwrap().unwrap();
        assert_eq!((n, wc[0].wr_id, wc[0].opcode), (1, i, WcOpcode::Send));
    }
}
