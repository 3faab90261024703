//! What kernel rxe presents under `/sys/class/infiniband*` for a device,
//! for softroce's devices: a pure description (paths and contents), so
//! the layout is tested without mounting anything.
//!
//! ```text
//! class/infiniband/<dev>/            (a directory: rxe has no device/ link)
//!   fw_ver "" node_desc node_guid node_type "1: CA" parent sys_image_guid uevent
//!   ports/1/ state phys_state rate link_layer lid sm_lid lid_mask_count sm_sl cap_mask
//!            gids/0..1023   gid_attrs/types/0..1023   gid_attrs/ndevs/0..1023   pkeys/0
//! class/infiniband_verbs/abi_version "6"
//! class/infiniband_verbs/uverbs<i>/  ibdev abi_version "2" dev uevent
//! ```
//!
//! Values are kernel rxe 6.1's (`../shared` listing): unpopulated GID
//! entries are zero GIDs with empty `types`/`ndevs` files (the kernel's read
//! of those fails with EINVAL, which tmpfs cannot do; UCX and NCCL skip zero
//! GIDs before they read the type).

use softroce::config::DeviceInfo;

/// One file of the view, by its path below `/sys/class`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    pub path: String,
    pub content: String,
}

/// rxe's GID table size (`gid_tbl_len`), and so the number of `gids/N`.
pub const GID_ENTRIES: usize = roce_proto::devattr::GID_TABLE_LEN as usize;

/// `uverbs<i>`'s character device number, as the kernel numbers them
/// (major 231, minors from 192).
pub fn uverbs_dev(i: usize) -> String {
    format!("231:{}", 192 + i)
}

fn guid_text(g: u64) -> String {
    let b = g.to_be_bytes();
    format!("{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7])
}

fn gid_text(g: [u8; 16]) -> String {
    g.chunks(2).map(|c| format!("{:02x}{:02x}", c[0], c[1])).collect::<Vec<_>>().join(":")
}

/// The files of device `d`, the `i`-th of the device list (`uverbs<i>`).
pub fn device_files(i: usize, d: &DeviceInfo) -> Vec<File> {
    let f = |path: String, content: String| File { path, content: format!("{content}\n") };
    let base = format!("infiniband/{}", d.name);
    let port = format!("{base}/ports/1");
    let netdev = d.interface.clone().unwrap_or_else(|| "lo".into());
    let guid = guid_text(d.node_guid());
    let mut out = vec![
        File { path: format!("{base}/fw_ver"), content: "\n".into() },
        f(format!("{base}/node_desc"), "rxe".into()),
        f(format!("{base}/node_guid"), guid.clone()),
        f(format!("{base}/node_type"), "1: CA".into()),
        f(format!("{base}/parent"), netdev.clone()),
        f(format!("{base}/sys_image_guid"), guid),
        f(format!("{base}/uevent"), format!("NAME={}", d.name)),
        f(format!("{port}/state"), "4: ACTIVE".into()),
        f(format!("{port}/phys_state"), "5: LinkUp".into()),
        // active_width 1X, active_speed SDR: what the verbs report.
        f(format!("{port}/rate"), "2.5 Gb/sec (1X SDR)".into()),
        f(format!("{port}/link_layer"), "Ethernet".into()),
        f(format!("{port}/lid"), "0x0".into()),
        f(format!("{port}/sm_lid"), "0x0".into()),
        f(format!("{port}/lid_mask_count"), "0".into()),
        f(format!("{port}/sm_sl"), "0".into()),
        f(format!("{port}/cap_mask"), "0x00010000".into()),
        f(format!("{port}/pkeys/0"), "0xffff".into()),
    ];
    for n in 0..GID_ENTRIES {
        let gid = d.gids.get(n).copied();
        let raw = gid.map_or([0; 16], roce_proto::devattr::gid_of);
        out.push(f(format!("{port}/gids/{n}"), gid_text(raw)));
        let (ty, nd) = match gid {
            Some(_) => ("RoCE v2\n".to_string(), format!("{netdev}\n")),
            None => (String::new(), String::new()),
        };
        out.push(File { path: format!("{port}/gid_attrs/types/{n}"), content: ty });
        out.push(File { path: format!("{port}/gid_attrs/ndevs/{n}"), content: nd });
    }
    let uv = format!("infiniband_verbs/uverbs{i}");
    out.push(f(format!("{uv}/ibdev"), d.name.clone()));
    out.push(f(format!("{uv}/abi_version"), "2".into()));
    out.push(f(format!("{uv}/dev"), uverbs_dev(i)));
    out.push(f(
        format!("{uv}/uevent"),
        format!("MAJOR=231\nMINOR={}\nDEVNAME=infiniband/uverbs{i}\nDEVMODE=0666", 192 + i),
    ));
    out
}

/// Every file of the view for `devices`, in the drop-in's device order.
pub fn files(devices: &[DeviceInfo]) -> Vec<File> {
    let mut out = vec![File { path: "infiniband_verbs/abi_version".into(), content: "6\n".into() }];
    for (i, d) in devices.iter().enumerate() {
        out.extend(device_files(i, d));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev() -> DeviceInfo {
        DeviceInfo {
            name: "softroce_eth0".into(),
            addr: "10.77.0.2".parse().unwrap(),
            interface: Some("eth0".into()),
            gids: vec!["fe80::5054:ff:fe77:2".parse().unwrap(), "10.77.0.2".parse().unwrap()],
            bindable: vec![false, true],
            link_mtu: 1500,
        }
    }

    fn get<'a>(files: &'a [File], path: &str) -> &'a str {
        &files.iter().find(|f| f.path == path).unwrap_or_else(|| panic!("no {path}")).content
    }

    #[test]
    fn a_device_looks_as_kernel_rxe_presents_one() {
        let files = files(&[dev()]);
        let p = "infiniband/softroce_eth0/ports/1";
        assert_eq!(get(&files, "infiniband/softroce_eth0/node_type"), "1: CA\n");
        assert_eq!(get(&files, "infiniband/softroce_eth0/parent"), "eth0\n");
        assert_eq!(get(&files, "infiniband/softroce_eth0/fw_ver"), "\n");
        assert_eq!(get(&files, &format!("{p}/state")), "4: ACTIVE\n");
        assert_eq!(get(&files, &format!("{p}/link_layer")), "Ethernet\n");
        // The kernel's formats (rxe-sysfs.txt): GIDs as 8 groups, the IPv4 one mapped.
        assert_eq!(get(&files, &format!("{p}/gids/1")), "0000:0000:0000:0000:0000:ffff:0a4d:0002\n");
        assert_eq!(get(&files, &format!("{p}/gids/0")), "fe80:0000:0000:0000:5054:00ff:fe77:0002\n");
        assert_eq!(get(&files, &format!("{p}/gids/2")), "0000:0000:0000:0000:0000:0000:0000:0000\n");
        assert_eq!(get(&files, &format!("{p}/gid_attrs/types/1")), "RoCE v2\n");
        assert_eq!(get(&files, &format!("{p}/gid_attrs/ndevs/0")), "eth0\n");
        assert_eq!(get(&files, &format!("{p}/gid_attrs/types/2")), "");
        assert_eq!(files.iter().filter(|f| f.path.starts_with(&format!("{p}/gids/"))).count(), 1024);
        assert_eq!(get(&files, "infiniband_verbs/uverbs0/ibdev"), "softroce_eth0\n");
        assert_eq!(get(&files, "infiniband_verbs/uverbs0/dev"), "231:192\n");
        assert_eq!(get(&files, "infiniband_verbs/abi_version"), "6\n");
        // The node GUID is the one the verbs report.
        let g = dev().node_guid().to_be_bytes();
        assert!(get(&files, "infiniband/softroce_eth0/node_guid").starts_with(&format!("{:02x}{:02x}:", g[0], g[1])));
    }
}
