//! The Rust API of the verbs that change objects: typed errors for CQ
//! bounds, CQ and SRQ resizes, moderation, and re-registration with the
//! keys kept.

use std::net::IpAddr;
use std::time::Duration;

use roce_proto::VerbError;
use roce_proto::cq::CqError;
use roce_proto::mr::MrError;
use softroce::config::{DeviceInfo, LoopbackLease};
use softroce::{AccessFlags, Context, Error, Options, RecvWr};

#[test]
fn cq_srq_and_mr_changes_through_the_rust_api() {
    let lease = LoopbackLease::take().expect("a free loopback address");
    let info = DeviceInfo::on_address("vc", IpAddr::V4(lease.addr())).unwrap();
    let ctx = Context::open_with(&info, Options::default()).unwrap();
    let max = ctx.query_device().max_cqe;
    let e = ctx.create_cq(max + 1, None).unwrap_err();
    assert!(matches!(e, Error::Verb(VerbError::Cqe { cqe, max: m }) if cqe == max + 1 && m == max), "{e}");
    let e = ctx.create_cq_on(8, None, 1).unwrap_err();
    assert!(matches!(e, Error::Verb(VerbError::CompVector { vector: 1, count: 1 })), "{e}");

    let cq = ctx.create_cq_on(10, None, 0).unwrap();
    assert_eq!(cq.size().unwrap(), 15);
    assert_eq!(cq.resize(100).unwrap(), 127);
    let e = cq.resize_holding(3, 5).unwrap_err();
    assert!(matches!(e, Error::Verb(VerbError::Cq(CqError::BelowHeld { cqe: 3, held: 5 }))), "{e}");
    assert_eq!(cq.size().unwrap(), 127);
    cq.set_moderation(4, Duration::from_micros(100)).unwrap();

    let pd = ctx.alloc_pd().unwrap();
    let srq = pd.create_srq(2, 1).unwrap();
    let mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    for i in 0..2 {
        srq.post_recv(&RecvWr { wr_id: i, sg_list: &[mr.sge(0, 64)] }).unwrap();
    }
    assert!(matches!(srq.resize(1), Err(Error::Verb(VerbError::Invalid(_)))));
    srq.resize(5).unwrap();
    assert_eq!(srq.size().unwrap(), 5);
    for i in 2..5 {
        srq.post_recv(&RecvWr { wr_id: i, sg_list: &[mr.sge(0, 64)] }).unwrap();
    }
    assert!(srq.post_recv(&RecvWr { wr_id: 9, sg_list: &[mr.sge(0, 64)] }).is_err());

    let (lkey, rkey) = (mr.lkey(), mr.rkey());
    let pd2 = ctx.alloc_pd().unwrap();
    let e = mr.rereg(None, Some(AccessFlags::REMOTE_WRITE)).unwrap_err();
    assert!(matches!(e, Error::Verb(VerbError::Mr(MrError::InvalidAccess(_)))), "{e}");
    let moved = mr.rereg(Some(&pd2), Some(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)).unwrap();
    assert_eq!((moved.lkey(), moved.rkey()), (lkey, rkey), "keys kept, as rxe 6.x");
    moved.write(0, b"still here").unwrap();
    assert_eq!(moved.to_vec(0, 10).unwrap(), b"still here");
    assert!(mr.rereg(None, None).is_err(), "the old handle is spent");
    drop(mr);
    // The memory moved to the new handle: dropping the spent one keeps it.
    assert_eq!(moved.to_vec(0, 5).unwrap(), b"still");
    moved.deregister().unwrap();
}
