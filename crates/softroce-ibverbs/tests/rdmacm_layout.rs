//! The librdmacm mirrors (`softroce_ibverbs::rdmacm_abi`) against the installed
//! `<rdma/rdma_cma.h>`: a C probe prints the size and every field's offset
//! of the structures applications touch, and each must equal the Rust one.
//! Without the header (librdmacm-dev) the check is skipped, except under
//! CI, which installs it.

use std::mem::{offset_of, size_of};
use std::path::Path;
use std::process::Command;

use softroce_ibverbs::rdmacm_abi::{
    RdmaAddrinfo, RdmaCmEvent, RdmaCmId, RdmaCmJoinMcAttrEx, RdmaConnParam, RdmaEventChannel, RdmaUdParam,
};

const HEADER: &str = "/usr/include/rdma/rdma_cma.h";

/// (C struct, C field or "(sizeof)", Rust offset or size).
fn rust_layout() -> Vec<(&'static str, &'static str, usize)> {
    vec![
        ("rdma_event_channel", "(sizeof)", size_of::<RdmaEventChannel>()),
        ("rdma_event_channel", "fd", offset_of!(RdmaEventChannel, fd)),
        ("rdma_cm_id", "(sizeof)", size_of::<RdmaCmId>()),
        ("rdma_cm_id", "verbs", offset_of!(RdmaCmId, verbs)),
        ("rdma_cm_id", "channel", offset_of!(RdmaCmId, channel)),
        ("rdma_cm_id", "context", offset_of!(RdmaCmId, context)),
        ("rdma_cm_id", "qp", offset_of!(RdmaCmId, qp)),
        ("rdma_cm_id", "route.addr.src_addr", offset_of!(RdmaCmId, src_addr)),
        ("rdma_cm_id", "route.addr.dst_addr", offset_of!(RdmaCmId, dst_addr)),
        ("rdma_cm_id", "route.addr.addr.ibaddr.sgid", offset_of!(RdmaCmId, sgid)),
        ("rdma_cm_id", "route.addr.addr.ibaddr.dgid", offset_of!(RdmaCmId, dgid)),
        ("rdma_cm_id", "route.addr.addr.ibaddr.pkey", offset_of!(RdmaCmId, pkey)),
        ("rdma_cm_id", "route.path_rec", offset_of!(RdmaCmId, path_rec)),
        ("rdma_cm_id", "route.num_paths", offset_of!(RdmaCmId, num_paths)),
        ("rdma_cm_id", "ps", offset_of!(RdmaCmId, ps)),
        ("rdma_cm_id", "port_num", offset_of!(RdmaCmId, port_num)),
        ("rdma_cm_id", "event", offset_of!(RdmaCmId, event)),
        ("rdma_cm_id", "send_cq_channel", offset_of!(RdmaCmId, send_cq_channel)),
        ("rdma_cm_id", "send_cq", offset_of!(RdmaCmId, send_cq)),
        ("rdma_cm_id", "recv_cq_channel", offset_of!(RdmaCmId, recv_cq_channel)),
        ("rdma_cm_id", "recv_cq", offset_of!(RdmaCmId, recv_cq)),
        ("rdma_cm_id", "srq", offset_of!(RdmaCmId, srq)),
        ("rdma_cm_id", "pd", offset_of!(RdmaCmId, pd)),
        ("rdma_cm_id", "qp_type", offset_of!(RdmaCmId, qp_type)),
        ("rdma_conn_param", "(sizeof)", size_of::<RdmaConnParam>()),
        ("rdma_conn_param", "private_data", offset_of!(RdmaConnParam, private_data)),
        ("rdma_conn_param", "private_data_len", offset_of!(RdmaConnParam, private_data_len)),
        ("rdma_conn_param", "responder_resources", offset_of!(RdmaConnParam, responder_resources)),
        ("rdma_conn_param", "initiator_depth", offset_of!(RdmaConnParam, initiator_depth)),
        ("rdma_conn_param", "flow_control", offset_of!(RdmaConnParam, flow_control)),
        ("rdma_conn_param", "retry_count", offset_of!(RdmaConnParam, retry_count)),
        ("rdma_conn_param", "rnr_retry_count", offset_of!(RdmaConnParam, rnr_retry_count)),
        ("rdma_conn_param", "srq", offset_of!(RdmaConnParam, srq)),
        ("rdma_conn_param", "qp_num", offset_of!(RdmaConnParam, qp_num)),
        ("rdma_ud_param", "(sizeof)", size_of::<RdmaUdParam>()),
        ("rdma_ud_param", "private_data", offset_of!(RdmaUdParam, private_data)),
        ("rdma_ud_param", "private_data_len", offset_of!(RdmaUdParam, private_data_len)),
        ("rdma_ud_param", "ah_attr", offset_of!(RdmaUdParam, ah_attr)),
        ("rdma_ud_param", "qp_num", offset_of!(RdmaUdParam, qp_num)),
        ("rdma_ud_param", "qkey", offset_of!(RdmaUdParam, qkey)),
        ("rdma_cm_join_mc_attr_ex", "(sizeof)", size_of::<RdmaCmJoinMcAttrEx>()),
        ("rdma_cm_join_mc_attr_ex", "comp_mask", offset_of!(RdmaCmJoinMcAttrEx, comp_mask)),
        ("rdma_cm_join_mc_attr_ex", "join_flags", offset_of!(RdmaCmJoinMcAttrEx, join_flags)),
        ("rdma_cm_join_mc_attr_ex", "addr", offset_of!(RdmaCmJoinMcAttrEx, addr)),
        ("rdma_cm_event", "(sizeof)", size_of::<RdmaCmEvent>()),
        ("rdma_cm_event", "id", offset_of!(RdmaCmEvent, id)),
        ("rdma_cm_event", "listen_id", offset_of!(RdmaCmEvent, listen_id)),
        ("rdma_cm_event", "event", offset_of!(RdmaCmEvent, event)),
        ("rdma_cm_event", "status", offset_of!(RdmaCmEvent, status)),
        ("rdma_cm_event", "param.conn", offset_of!(RdmaCmEvent, param)),
        ("rdma_cm_event", "param.ud", offset_of!(RdmaCmEvent, param)),
        ("rdma_addrinfo", "(sizeof)", size_of::<RdmaAddrinfo>()),
        ("rdma_addrinfo", "ai_flags", offset_of!(RdmaAddrinfo, ai_flags)),
        ("rdma_addrinfo", "ai_family", offset_of!(RdmaAddrinfo, ai_family)),
        ("rdma_addrinfo", "ai_qp_type", offset_of!(RdmaAddrinfo, ai_qp_type)),
        ("rdma_addrinfo", "ai_port_space", offset_of!(RdmaAddrinfo, ai_port_space)),
        ("rdma_addrinfo", "ai_src_len", offset_of!(RdmaAddrinfo, ai_src_len)),
        ("rdma_addrinfo", "ai_dst_len", offset_of!(RdmaAddrinfo, ai_dst_len)),
        ("rdma_addrinfo", "ai_src_addr", offset_of!(RdmaAddrinfo, ai_src_addr)),
        ("rdma_addrinfo", "ai_dst_addr", offset_of!(RdmaAddrinfo, ai_dst_addr)),
        ("rdma_addrinfo", "ai_src_canonname", offset_of!(RdmaAddrinfo, ai_src_canonname)),
        ("rdma_addrinfo", "ai_dst_canonname", offset_of!(RdmaAddrinfo, ai_dst_canonname)),
        ("rdma_addrinfo", "ai_route_len", offset_of!(RdmaAddrinfo, ai_route_len)),
        ("rdma_addrinfo", "ai_route", offset_of!(RdmaAddrinfo, ai_route)),
        ("rdma_addrinfo", "ai_connect_len", offset_of!(RdmaAddrinfo, ai_connect_len)),
        ("rdma_addrinfo", "ai_connect", offset_of!(RdmaAddrinfo, ai_connect)),
        ("rdma_addrinfo", "ai_next", offset_of!(RdmaAddrinfo, ai_next)),
    ]
}

#[test]
fn rdmacm_mirrors_match_the_installed_header() {
    if !Path::new(HEADER).exists() {
        assert!(std::env::var_os("CI").is_none(), "{HEADER} is missing: CI must install librdmacm-dev");
        println!("skipped: librdmacm-dev not installed");
        return;
    }
    let layout = rust_layout();
    let mut body = String::new();
    for (s, f, _) in &layout {
        if *f == "(sizeof)" {
            body += &format!("\tprintf(\"%zu\\n\", sizeof(struct {s}));\n");
        } else {
            body += &format!("\tprintf(\"%zu\\n\", offsetof(struct {s}, {f}));\n");
        }
    }
    let dir = std::env::temp_dir().join(format!("softroce-rdmacm-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join("probe.c"), dir.join("probe"));
    std::fs::write(&src, format!("#include <stddef.h>\n#include <stdio.h>\n#include <rdma/rdma_cma.h>\nint main(void) {{\n{body}\treturn 0;\n}}\n")).unwrap();
    let cc = Command::new("cc").arg("-o").arg(&exe).arg(&src).output().expect("a C compiler");
    assert!(cc.status.success(), "{}", String::from_utf8_lossy(&cc.stderr));
    let out = Command::new(&exe).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let c: Vec<usize> = String::from_utf8(out.stdout).unwrap().lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(c.len(), layout.len());
    let wrong: Vec<String> = layout
        .iter()
        .zip(&c)
        .filter(|((_, _, r), c)| r != *c)
        .map(|((s, f, r), c)| format!("{s}.{f}: Rust {r}, C {c}"))
        .collect();
    assert!(wrong.is_empty(), "layouts differ:\n{}", wrong.join("\n"));
}
