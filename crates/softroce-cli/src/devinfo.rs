//! `softroce devices` and `softroce devinfo`: rdma-core's `ibv_devices` and
//! `ibv_devinfo` for softroce devices, same columns and field names.

use std::fmt::Write as _;
use std::process::ExitCode;

use roce_proto::Limits;
use roce_proto::devattr::{DeviceAttr, PortAttr, cap, gid_of};
use softroce::config::DeviceInfo;

fn guid_colons(g: u64) -> String {
    let b = g.to_be_bytes();
    format!("{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7])
}

/// `ibv_devices`' table.
pub fn devices_table(devs: &[DeviceInfo]) -> String {
    let mut s = String::from("    device          \t   node GUID\n    ------          \t----------------\n");
    for d in devs {
        let _ = writeln!(s, "    {:<16}\t{:016x}", d.name, d.node_guid());
    }
    s
}

fn mtu_line(m: roce_proto::Mtu) -> String {
    format!("{} ({})", m.bytes(), m as u32)
}

fn gid_text(a: std::net::IpAddr) -> String {
    match a {
        std::net::IpAddr::V4(v) => format!("::ffff:{v}"),
        std::net::IpAddr::V6(v) => v.to_string(),
    }
}

/// `ibv_devinfo [-v]` for one device.
pub fn devinfo_text(d: &DeviceInfo, verbose: bool) -> String {
    let limits = Limits::default();
    let a = DeviceAttr::new(&limits, &d.gids);
    let p = PortAttr::new(&limits, d.active_mtu());
    let mut s = String::new();
    let _ = writeln!(s, "hca_id:\t{}", d.name);
    let _ = writeln!(s, "\ttransport:\t\t\tInfiniBand (0)");
    let _ = writeln!(s, "\tfw_ver:\t\t\t\t{}", a.fw_ver);
    let _ = writeln!(s, "\tnode_guid:\t\t\t{}", guid_colons(a.node_guid));
    let _ = writeln!(s, "\tsys_image_guid:\t\t\t{}", guid_colons(a.sys_image_guid));
    let _ = writeln!(s, "\tvendor_id:\t\t\t{:#x}", a.vendor_id);
    let _ = writeln!(s, "\tvendor_part_id:\t\t\t{}", a.vendor_part_id);
    let _ = writeln!(s, "\thw_ver:\t\t\t\t{:#x}", a.hw_ver);
    let _ = writeln!(s, "\tphys_port_cnt:\t\t\t{}", a.phys_port_cnt);
    if verbose {
        let _ = writeln!(s, "\tmax_mr_size:\t\t\t{:#x}", a.max_mr_size);
        let _ = writeln!(s, "\tpage_size_cap:\t\t\t{:#x}", a.page_size_cap);
        let _ = writeln!(s, "\tmax_qp:\t\t\t\t{}", a.max_qp);
        let _ = writeln!(s, "\tmax_qp_wr:\t\t\t{}", a.max_qp_wr);
        let _ = writeln!(s, "\tdevice_cap_flags:\t\t{:#010x}", a.device_cap_flags);
        for (bit, name) in [
            (cap::BAD_PKEY_CNTR, "BAD_PKEY_CNTR"),
            (cap::BAD_QKEY_CNTR, "BAD_QKEY_CNTR"),
            (cap::AUTO_PATH_MIG, "AUTO_PATH_MIG"),
            (cap::CHANGE_PHY_PORT, "CHANGE_PHY_PORT"),
            (cap::UD_AV_PORT_ENFORCE, "UD_AV_PORT_ENFORCE"),
            (cap::PORT_ACTIVE_EVENT, "PORT_ACTIVE_EVENT"),
            (cap::SYS_IMAGE_GUID, "SYS_IMAGE_GUID"),
            (cap::RC_RNR_NAK_GEN, "RC_RNR_NAK_GEN"),
            (cap::SRQ_RESIZE, "SRQ_RESIZE"),
            (cap::MEM_WINDOW, "MEM_WINDOW"),
            (cap::MEM_MGT_EXTENSIONS, "MEM_MGT_EXTENSIONS"),
            (cap::MEM_WINDOW_TYPE_2B, "MEM_WINDOW_TYPE_2B"),
        ] {
            if a.device_cap_flags & bit != 0 {
                let _ = writeln!(s, "\t\t\t\t\t{name}");
            }
        }
        for (k, v) in [
            ("max_sge", a.max_sge.to_string()),
            ("max_sge_rd", a.max_sge_rd.to_string()),
            ("max_cq", a.max_cq.to_string()),
            ("max_cqe", a.max_cqe.to_string()),
            ("max_mr", a.max_mr.to_string()),
            ("max_pd", a.max_pd.to_string()),
            ("max_qp_rd_atom", a.max_qp_rd_atom.to_string()),
            ("max_ee_rd_atom", "0".into()),
            ("max_res_rd_atom", a.max_res_rd_atom.to_string()),
            ("max_qp_init_rd_atom", a.max_qp_init_rd_atom.to_string()),
            ("max_ee_init_rd_atom", "0".into()),
            ("atomic_cap", format!("ATOMIC_HCA ({})", a.atomic_cap)),
            ("max_ee", "0".into()),
            ("max_rdd", "0".into()),
            ("max_mw", a.max_mw.to_string()),
            ("max_raw_ipv6_qp", "0".into()),
            ("max_raw_ethy_qp", "0".into()),
            ("max_mcast_grp", a.max_mcast_grp.to_string()),
            ("max_mcast_qp_attach", a.max_mcast_qp_attach.to_string()),
            ("max_total_mcast_qp_attach", a.max_total_mcast_qp_attach.to_string()),
            ("max_ah", a.max_ah.to_string()),
            ("max_fmr", "0".into()),
            ("max_srq", a.max_srq.to_string()),
            ("max_srq_wr", a.max_srq_wr.to_string()),
            ("max_srq_sge", a.max_srq_sge.to_string()),
            ("max_pkeys", a.max_pkeys.to_string()),
            ("local_ca_ack_delay", a.local_ca_ack_delay.to_string()),
        ] {
            let tabs = match k.len() {
                0..8 => "\t\t\t\t",
                8..16 => "\t\t\t",
                16..24 => "\t\t",
                _ => "\t",
            };
            let _ = writeln!(s, "\t{k}:{tabs}{v}");
        }
    }
    let _ = writeln!(s, "\t\tport:\t1");
    let _ = writeln!(s, "\t\t\tstate:\t\t\tPORT_ACTIVE ({})", p.state);
    let _ = writeln!(s, "\t\t\tmax_mtu:\t\t{}", mtu_line(p.max_mtu));
    let _ = writeln!(s, "\t\t\tactive_mtu:\t\t{}", mtu_line(p.active_mtu));
    let _ = writeln!(s, "\t\t\tsm_lid:\t\t\t{}", p.sm_lid);
    let _ = writeln!(s, "\t\t\tport_lid:\t\t{}", p.lid);
    let _ = writeln!(s, "\t\t\tport_lmc:\t\t0x00");
    let _ = writeln!(s, "\t\t\tlink_layer:\t\tEthernet");
    if verbose {
        let _ = writeln!(s, "\t\t\tmax_msg_sz:\t\t{:#x}", p.max_msg_sz);
        let _ = writeln!(s, "\t\t\tport_cap_flags:\t\t{:#010x}", p.port_cap_flags);
        let _ = writeln!(s, "\t\t\tport_cap_flags2:\t0x0000");
        let _ = writeln!(s, "\t\t\tmax_vl_num:\t\t1 ({})", p.max_vl_num);
        let _ = writeln!(s, "\t\t\tbad_pkey_cntr:\t\t0x0");
        let _ = writeln!(s, "\t\t\tqkey_viol_cntr:\t\t0x0");
        let _ = writeln!(s, "\t\t\tsm_sl:\t\t\t0");
        let _ = writeln!(s, "\t\t\tpkey_tbl_len:\t\t{}", p.pkey_tbl_len);
        let _ = writeln!(s, "\t\t\tgid_tbl_len:\t\t{}", p.gid_tbl_len);
        let _ = writeln!(s, "\t\t\tsubnet_timeout:\t\t0");
        let _ = writeln!(s, "\t\t\tinit_type_reply:\t0");
        let _ = writeln!(s, "\t\t\tactive_width:\t\t1X ({})", p.active_width);
        let _ = writeln!(s, "\t\t\tactive_speed:\t\t2.5 Gbps ({})", p.active_speed);
        let _ = writeln!(s, "\t\t\tphys_state:\t\tLINK_UP ({})", p.phys_state);
        for (i, g) in d.gids.iter().enumerate() {
            let _ = gid_of(*g);
            let _ = writeln!(s, "\t\t\tGID[{i:>3}]:\t\t{}, RoCE v2", gid_text(*g));
        }
    }
    s
}

fn list() -> Result<Vec<DeviceInfo>, softroce::Error> {
    softroce::devices()
}

/// `softroce devices`.
pub fn run_devices() -> ExitCode {
    match list() {
        Ok(d) => {
            print!("{}", devices_table(&d));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("softroce devices: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `softroce devinfo [-d DEV] [-v]`.
pub fn run_devinfo(device: Option<&str>, verbose: bool) -> ExitCode {
    let devs = match list() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("softroce devinfo: {e}");
            return ExitCode::FAILURE;
        }
    };
    let chosen: Vec<&DeviceInfo> = devs.iter().filter(|d| device.is_none_or(|n| d.name == n)).collect();
    if chosen.is_empty() {
        eprintln!(
            "softroce devinfo: no device {:?} (devices: {:?})",
            device.unwrap_or(""),
            devs.iter().map(|d| &d.name).collect::<Vec<_>>()
        );
        return ExitCode::FAILURE;
    }
    for d in chosen {
        println!("{}", devinfo_text(d, verbose));
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rxe0() -> DeviceInfo {
        DeviceInfo {
            name: "rxe0".into(),
            addr: "10.77.0.2".parse().unwrap(),
            interface: Some("eth0".into()),
            gids: vec!["fe80::5054:ff:fe77:2".parse().unwrap(), "10.77.0.2".parse().unwrap()],
            bindable: vec![false, true],
            link_mtu: 1500,
        }
    }

    /// The lines of rxe's `ibv_devinfo -v` (rxe-devinfo.txt) that do not
    /// depend on the machine match softroce's for the same GID table.
    #[test]
    fn devinfo_has_rxes_fields_and_values() {
        let t = devinfo_text(&rxe0(), true);
        for line in [
            "hca_id:\trxe0",
            "\ttransport:\t\t\tInfiniBand (0)",
            "\tfw_ver:\t\t\t\t0.0.0",
            "\tvendor_id:\t\t\t0xffffff",
            "\tphys_port_cnt:\t\t\t1",
            "\tmax_mr_size:\t\t\t0xffffffffffffffff",
            "\tpage_size_cap:\t\t\t0xfffff000",
            "\tmax_qp:\t\t\t\t1048560",
            "\tdevice_cap_flags:\t\t0x01223c76",
            "\t\t\t\t\tMEM_WINDOW_TYPE_2B",
            "\tmax_qp_rd_atom:\t\t\t128",
            "\tatomic_cap:\t\t\tATOMIC_HCA (1)",
            "\tmax_srq_sge:\t\t\t27",
            "\t\t\tstate:\t\t\tPORT_ACTIVE (4)",
            "\t\t\tmax_mtu:\t\t4096 (5)",
            "\t\t\tactive_mtu:\t\t1024 (3)",
            "\t\t\tlink_layer:\t\tEthernet",
            "\t\t\tport_cap_flags:\t\t0x00010000",
            "\t\t\tgid_tbl_len:\t\t1024",
            "\t\t\tGID[  0]:\t\tfe80::5054:ff:fe77:2, RoCE v2",
            "\t\t\tGID[  1]:\t\t::ffff:10.77.0.2, RoCE v2",
        ] {
            assert!(t.lines().any(|l| l == line), "missing {line:?} in\n{t}");
        }
        let short = devinfo_text(&rxe0(), false);
        assert!(!short.contains("max_qp:") && short.contains("active_mtu:"));
        let table = devices_table(&[rxe0()]);
        assert!(table.starts_with("    device          \t   node GUID\n    ------          \t----------------\n"));
        assert!(table.lines().nth(2).unwrap().starts_with("    rxe0            \t"));
    }
}
