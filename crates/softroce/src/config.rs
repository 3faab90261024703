//! Which softroce devices exist: found with no configuration from the
//! host's interfaces, or named by the user.
//!
//! - `SOFTROCE_DEVICES="NAME=ADDR[,NAME=ADDR...]"` names devices by address
//!   (e.g. `a=127.0.0.2,b=127.0.0.3`: two processes on one host each use
//!   their own address, since each device binds `ADDR:4791`).
//! - Otherwise the file `SOFTROCE_CONFIG`, else `$XDG_CONFIG_HOME/softroce/devices`
//!   (default `~/.config/softroce/devices`), else `/etc/softroce/devices`, if one
//!   exists: one `NAME = ADDR` per line, `#` comments.
//! - Otherwise one device per interface that is up and has an IPv4 address,
//!   named `softroce_<interface>` (e.g. `softroce_lo` on 127.0.0.1,
//!   `softroce_eth0`), in the order the kernel lists them but with loopback
//!   last: the first device is every program's default, and it should be
//!   one a peer on another host can reach. A name is at most
//!   [`MAX_NAME_LEN`] characters: where `softroce_<interface>` is longer it
//!   is `sr_<interface>`, cut to fit (and ended by a number where two
//!   interfaces would share it), e.g. `sr_enp0s31f6`, `sr_docker0`.
//!
//! - Then, unless `SOFTROCE_DEVICES` names the devices, the devices added
//!   by `softroce rdma link add NAME type rxe netdev IF` (iproute2's command
//!   for kernel rxe), kept in `$XDG_CONFIG_HOME/softroce/added` (default
//!   `~/.config/softroce/added`; `SOFTROCE_ADDED` names another file): one
//!   `NAME netdev IF` per line. As the kernel allows one rxe device per
//!   net device, an added device takes the place of the device already on
//!   its interface's address (`softroce_eth0` becomes `rxe0`, in the same
//!   position), and is otherwise listed after the others (loopback still
//!   last). Its address is the interface's first IPv4 address (else its
//!   first IPv6 one that is not link-local); one whose interface is gone
//!   or has no address is not listed, as the kernel removes rxe devices
//!   with their net device.
//!
//! The GID table is built as Linux rxe presents it: index 0 is the
//! interface's link-local IPv6 address (or, where it has none, as on
//! loopback, the `fe80::` address of the device's GUID), then the IPv4
//! address as `::ffff:a.b.c.d`, then the interface's other IPv6 addresses.
//! The active MTU follows rxe: the interface MTU less 80 bytes of headers,
//! rounded down to 256..4096.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use roce_proto::{Mtu, WideMtu};

/// The longest name a device found from the interfaces gets. UCX (1.13 and
/// since) keeps RDMA device names in 16-byte buffers (`UCT_MD_NAME_MAX`): it
/// cuts a longer name to 15 characters, finds no device by the cut name and
/// leaves the device out without a word (Open MPI then has no softroce
/// transport: "PML ucx cannot be selected"). Kernel device names such as
/// `mlx5_0` or `rxe0` never come near.
pub const MAX_NAME_LEN: usize = 15;

/// The name of the device on `interface`: `softroce_<interface>` if it fits
/// in [`MAX_NAME_LEN`], else `sr_<interface>` cut to fit; a name in `taken`
/// has its end replaced by the first number that makes it new.
fn device_name(interface: &str, taken: &[&str]) -> String {
    // UCX's limit is in bytes: cut after the last whole character that fits.
    let cut = |s: &str, room: usize| -> String {
        let end = s.char_indices().map(|(i, c)| i + c.len_utf8()).take_while(|e| *e <= room).last().unwrap_or(0);
        s[..end].to_string()
    };
    let full = format!("softroce_{interface}");
    let base = if full.len() <= MAX_NAME_LEN { full } else { cut(&format!("sr_{interface}"), MAX_NAME_LEN) };
    if !taken.contains(&base.as_str()) {
        return base;
    }
    (2u32..)
        .map(|n| {
            let n = n.to_string();
            cut(&base, MAX_NAME_LEN - n.len()) + &n
        })
        .find(|name| !taken.contains(&name.as_str()))
        .expect("a number makes the name new")
}

/// A device the user can open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Name (`ibv_get_device_name`).
    pub name: String,
    /// The address it binds (port 4791) and sends from.
    pub addr: IpAddr,
    /// The interface that holds `addr`, if known.
    pub interface: Option<String>,
    /// The GID table, as addresses (index = GID index).
    pub gids: Vec<IpAddr>,
    /// Which GIDs are addresses of this host's interface, which the device
    /// receives on and sends from (others, like a link-local address made
    /// up for loopback, are listed but cannot be reached).
    pub bindable: Vec<bool>,
    /// The MTU of the link that holds `addr` (the interface's, read once
    /// when the device was made; 1500 when it is not known): the port's
    /// active MTU and the widest [`WideMtu`] follow from it.
    pub link_mtu: u32,
}

impl DeviceInfo {
    /// The device `name` on `addr`, exactly as `SOFTROCE_DEVICES=name=addr`
    /// would make it (GID table and active MTU from the interface holding
    /// the address; any 127.x.y.z is on loopback).
    pub fn on_address(name: impl Into<String>, addr: IpAddr) -> Result<DeviceInfo, ConfigError> {
        Ok(device_for(name.into(), addr, &interface_addrs()?))
    }

    /// The device `softroce_loX` on 127.0.0.X, for tools that need one with
    /// no configuration (take the address from a [`LoopbackLease`] unless
    /// nothing else may run beside).
    pub fn loopback(x: u8) -> Result<DeviceInfo, ConfigError> {
        DeviceInfo::on_address(format!("softroce_lo{x}"), IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, x)))
    }

    /// The GID index of the device's own address (1 for IPv4, as in rxe).
    pub fn addr_gid_index(&self) -> usize {
        self.gids.iter().position(|g| *g == self.addr).unwrap_or(0)
    }

    /// The port's active MTU, as rxe derives it from the link's
    /// ([`active_mtu_for`]).
    pub fn active_mtu(&self) -> Mtu {
        active_mtu_for(self.link_mtu)
    }

    /// The largest [`WideMtu`] the device's link carries from its address.
    pub fn wide_mtu(&self) -> Option<WideMtu> {
        WideMtu::for_link_mtu(self.link_mtu as usize, self.addr.is_ipv6())
    }

    /// The node GUID (from the GID table, as `ibv_devinfo` shows it).
    pub fn node_guid(&self) -> u64 {
        roce_proto::devattr::node_guid(&self.gids)
    }
}

/// Why the device list cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A `NAME=ADDR` entry is malformed.
    #[error("{origin}: bad device entry {entry:?}: expected NAME=ADDR, e.g. sr0=127.0.0.2")]
    BadEntry {
        /// Where it came from.
        origin: String,
        /// The entry.
        entry: String,
    },
    /// Two devices have one name.
    #[error("{origin}: device name {name:?} is given twice")]
    DuplicateName {
        /// Where it came from.
        origin: String,
        /// The name.
        name: String,
    },
    /// The configuration file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Interfaces cannot be listed.
    #[error("cannot list network interfaces: {0}")]
    Interfaces(#[from] nix::Error),
    /// A line of the added devices' file is malformed.
    #[error("{path}: bad line {line:?}: expected NAME netdev IF, e.g. rxe0 netdev eth0")]
    BadAdded {
        /// The file.
        path: PathBuf,
        /// The line.
        line: String,
    },
    /// `link add` of a device name or on an interface that is taken.
    #[error("{0}")]
    Exists(String),
    /// `link add` on an interface that does not exist.
    #[error("no network interface {0:?}")]
    NoInterface(String),
    /// `link delete` of a device `link add` did not make.
    #[error("{0}")]
    NotAdded(String),
    /// The added devices' file cannot be written (or, with neither
    /// `XDG_CONFIG_HOME` nor `HOME` set, has no place).
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// One interface address.
#[derive(Debug, Clone)]
struct IfAddr {
    interface: String,
    addr: IpAddr,
    up: bool,
}

fn interface_addrs() -> Result<Vec<IfAddr>, ConfigError> {
    let mut out = Vec::new();
    for a in nix::ifaddrs::getifaddrs()? {
        let Some(sa) = a.address else { continue };
        let addr = if let Some(v4) = sa.as_sockaddr_in() {
            IpAddr::V4(v4.ip())
        } else if let Some(v6) = sa.as_sockaddr_in6() {
            IpAddr::V6(v6.ip())
        } else {
            continue;
        };
        let up = a.flags.contains(nix::net::if_::InterfaceFlags::IFF_UP);
        out.push(IfAddr { interface: a.interface_name, addr, up });
    }
    Ok(out)
}

/// rxe's active MTU for an interface MTU: less `RXE_MAX_HDR_LENGTH` (80),
/// rounded down to an IB MTU.
pub fn active_mtu_for(if_mtu: u32) -> Mtu {
    match if_mtu.saturating_sub(80) {
        0..512 => Mtu::Mtu256,
        512..1024 => Mtu::Mtu512,
        1024..2048 => Mtu::Mtu1024,
        2048..4096 => Mtu::Mtu2048,
        _ => Mtu::Mtu4096,
    }
}

fn interface_mtu(interface: &str) -> Option<u32> {
    std::fs::read_to_string(Path::new("/sys/class/net").join(interface).join("mtu")).ok()?.trim().parse().ok()
}

fn is_link_local(a: &IpAddr) -> bool {
    matches!(a, IpAddr::V6(v) if v.segments()[0] & 0xffc0 == 0xfe80)
}

/// `ip:port` as a socket address, a link-local address with `scope` (its
/// interface's index), which binding it or sending to it needs.
pub(crate) fn scoped(ip: IpAddr, port: u16, scope: u32) -> std::net::SocketAddr {
    match ip {
        IpAddr::V6(v) if is_link_local(&ip) => std::net::SocketAddr::V6(std::net::SocketAddrV6::new(v, port, 0, scope)),
        a => std::net::SocketAddr::new(a, port),
    }
}

/// Builds the device for `addr`, looked up among the host's interfaces.
fn device_for(name: String, addr: IpAddr, ifaddrs: &[IfAddr]) -> DeviceInfo {
    let interface = ifaddrs.iter().find(|i| i.addr == addr).map(|i| i.interface.clone()).or_else(|| {
        // 127.0.0.2 and friends are loopback addresses without being listed.
        let lo = match addr {
            IpAddr::V4(v) => v.is_loopback(),
            IpAddr::V6(v) => v.is_loopback(),
        };
        lo.then(|| ifaddrs.iter().find(|i| i.addr.is_loopback()).map(|i| i.interface.clone())).flatten()
    });
    let same_if: Vec<IpAddr> = match &interface {
        Some(n) => ifaddrs.iter().filter(|i| &i.interface == n).map(|i| i.addr).collect(),
        None => Vec::new(),
    };
    let mut gids = Vec::new();
    let mut bindable = Vec::new();
    match same_if.iter().find(|a| is_link_local(a)) {
        Some(ll) => {
            // Bound with the interface's index as its scope.
            gids.push(*ll);
            bindable.push(true);
        }
        None => {
            let guid = roce_proto::devattr::node_guid(&[addr]);
            gids.push(IpAddr::V6(roce_proto::devattr::link_local_of(guid)));
            bindable.push(false);
        }
    }
    if !gids.contains(&addr) {
        gids.push(addr);
        bindable.push(true);
    }
    // The interface's other IPv6 addresses, as rxe lists them, but
    // loopback's `::1`: every loopback device (127.0.0.x) would list it,
    // none can receive it for the others (a `::1` device of its own may
    // hold that port), so a peer addressing it would reach nobody.
    for a in same_if {
        if matches!(a, IpAddr::V6(_)) && !is_link_local(&a) && !a.is_loopback() && !gids.contains(&a) && addr.is_ipv4()
        {
            gids.push(a);
            bindable.push(true);
        }
    }
    let link_mtu = interface.as_deref().and_then(interface_mtu).unwrap_or(1500);
    DeviceInfo { name, addr, interface, gids, bindable, link_mtu }
}

fn parse_entries(origin: &str, entries: impl Iterator<Item = String>) -> Result<Vec<(String, IpAddr)>, ConfigError> {
    let mut out: Vec<(String, IpAddr)> = Vec::new();
    for entry in entries {
        let bad = || ConfigError::BadEntry { origin: origin.to_string(), entry: entry.clone() };
        let (name, addr) = entry.split_once('=').ok_or_else(bad)?;
        let (name, addr) = (name.trim(), addr.trim());
        let valid_name = !name.is_empty() && name.len() <= 63 && name.chars().all(|c| c.is_ascii_graphic());
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        if !valid_name {
            return Err(bad());
        }
        if out.iter().any(|(n, _)| n == name) {
            return Err(ConfigError::DuplicateName { origin: origin.to_string(), name: name.to_string() });
        }
        out.push((name.to_string(), addr));
    }
    Ok(out)
}

/// Parses `SOFTROCE_DEVICES` syntax: `NAME=ADDR` entries separated by commas.
pub fn parse_device_list(origin: &str, s: &str) -> Result<Vec<(String, IpAddr)>, ConfigError> {
    parse_entries(origin, s.split(',').map(str::trim).filter(|e| !e.is_empty()).map(String::from))
}

/// Parses a configuration file's text: `NAME = ADDR` lines, `#` comments.
pub fn parse_config_file(origin: &str, text: &str) -> Result<Vec<(String, IpAddr)>, ConfigError> {
    let lines = text.lines().map(|l| l.split('#').next().unwrap_or("").trim()).filter(|l| !l.is_empty());
    parse_entries(origin, lines.map(String::from))
}

fn config_file() -> Option<PathBuf> {
    if let Some(p) = crate::env::os(crate::env::CONFIG) {
        return Some(PathBuf::from(p));
    }
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")));
    let candidates =
        xdg.map(|x| x.join("softroce/devices")).into_iter().chain([PathBuf::from("/etc/softroce/devices")]);
    candidates.into_iter().find(|p| p.is_file())
}

/// The devices this process can open (see the module docs for the order
/// of sources).
pub fn devices() -> Result<Vec<DeviceInfo>, ConfigError> {
    let ifaddrs = interface_addrs()?;
    if let Some(list) = crate::env::string(crate::env::DEVICES) {
        let named = parse_device_list(crate::env::DEVICES, &list)?;
        return Ok(named.into_iter().map(|(n, a)| device_for(n, a, &ifaddrs)).collect());
    }
    let mut out = if let Some(path) = config_file() {
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read { path: path.clone(), source })?;
        let named = parse_config_file(&path.display().to_string(), &text)?;
        named.into_iter().map(|(n, a)| device_for(n, a, &ifaddrs)).collect()
    } else {
        automatic_devices(&ifaddrs)
    };
    with_added(&mut out, &added_devices()?, &ifaddrs);
    Ok(out)
}

/// One device per interface (see the module docs).
fn automatic_devices(ifaddrs: &[IfAddr]) -> Vec<DeviceInfo> {
    let mut out: Vec<DeviceInfo> = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for i in ifaddrs.iter().filter(|i| i.up && i.addr.is_ipv4()) {
        // One device per interface, on its first IPv4 address.
        if seen.contains(&i.interface.as_str()) {
            continue;
        }
        seen.push(&i.interface);
        let taken: Vec<&str> = out.iter().map(|d| d.name.as_str()).collect();
        let name = device_name(&i.interface, &taken);
        out.push(device_for(name, i.addr, ifaddrs));
    }
    // The first device is every program's default: make it one a remote
    // peer can reach, with loopback last (issue 18; a named list keeps
    // the user's order).
    out.sort_by_key(|d| d.addr.is_loopback());
    out
}

/// A device `softroce rdma link add` made: a name on a net device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Added {
    /// The device's name.
    pub name: String,
    /// The interface it is on.
    pub netdev: String,
}

/// The file of added devices: `SOFTROCE_ADDED`, else
/// `$XDG_CONFIG_HOME/softroce/added`, else `~/.config/softroce/added`.
pub fn added_file() -> Option<PathBuf> {
    if let Some(p) = crate::env::path(crate::env::ADDED) {
        return Some(p);
    }
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|x| !x.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(xdg.join("softroce/added"))
}

fn valid_netdev(s: &str) -> bool {
    // The kernel's `dev_valid_name`: 1..=15 bytes, no '/', ':' or space.
    !s.is_empty()
        && s.len() < 16
        && s != "."
        && s != ".."
        && s.chars().all(|c| c.is_ascii_graphic() && c != '/' && c != ':')
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| c.is_ascii_graphic() && c != '/' && c != '=' && c != ',' && c != '#')
}

/// Parses the added devices' file: `NAME netdev IF` lines, `#` comments.
pub fn parse_added(path: &Path, text: &str) -> Result<Vec<Added>, ConfigError> {
    let mut out: Vec<Added> = Vec::new();
    for line in text.lines().map(|l| l.split('#').next().unwrap_or("").trim()).filter(|l| !l.is_empty()) {
        let bad = || ConfigError::BadAdded { path: path.to_path_buf(), line: line.to_string() };
        let f: Vec<&str> = line.split_whitespace().collect();
        let [name, "netdev", netdev] = f[..] else { return Err(bad()) };
        if !valid_name(name) || !valid_netdev(netdev) {
            return Err(bad());
        }
        if out.iter().any(|a| a.name == name) {
            return Err(ConfigError::DuplicateName { origin: path.display().to_string(), name: name.to_string() });
        }
        out.push(Added { name: name.to_string(), netdev: netdev.to_string() });
    }
    Ok(out)
}

/// The devices `softroce rdma link add` made (none without the file).
pub fn added_devices() -> Result<Vec<Added>, ConfigError> {
    let Some(path) = added_file() else { return Ok(Vec::new()) };
    match std::fs::read_to_string(&path) {
        Ok(text) => parse_added(&path, &text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(source) => Err(ConfigError::Read { path, source }),
    }
}

/// The address an added device on `netdev` binds: the interface's first
/// IPv4 address, else its first IPv6 one that is not link-local.
fn added_addr(netdev: &str, ifaddrs: &[IfAddr]) -> Option<IpAddr> {
    let on = || ifaddrs.iter().filter(|i| i.interface == netdev).map(|i| i.addr);
    on().find(IpAddr::is_ipv4).or_else(|| on().find(|a| !is_link_local(a)))
}

/// Puts the added devices into `out`: each takes the place of the device
/// on its address, or goes after the others (loopback last).
fn with_added(out: &mut Vec<DeviceInfo>, added: &[Added], ifaddrs: &[IfAddr]) {
    for a in added {
        let Some(addr) = added_addr(&a.netdev, ifaddrs) else { continue };
        let d = device_for(a.name.clone(), addr, ifaddrs);
        // A name given twice (a configured device called as an added one):
        // the added one is the device.
        out.retain(|o| o.name != a.name || o.addr == addr);
        match out.iter().position(|o| o.addr == addr) {
            Some(i) => out[i] = d,
            None => {
                let at = out.iter().position(|o| o.addr.is_loopback() && !addr.is_loopback()).unwrap_or(out.len());
                out.insert(at, d);
            }
        }
    }
}

/// Runs `f` on the added devices' list under a lock and writes what it
/// returns (atomically: a reader sees the old file or the new one).
fn edit_added(f: impl FnOnce(Vec<Added>) -> Result<Vec<Added>, ConfigError>) -> Result<(), ConfigError> {
    let no_home = || std::io::Error::new(std::io::ErrorKind::NotFound, "neither XDG_CONFIG_HOME nor HOME is set");
    let path =
        added_file().ok_or_else(|| ConfigError::Write { path: PathBuf::from("softroce/added"), source: no_home() })?;
    let werr = |source| ConfigError::Write { path: path.clone(), source };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(werr)?;
    }
    let lock_path = path.with_extension("lock");
    let lock = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path).map_err(werr)?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).map_err(|e| werr(e.into()))?;
    let list = f(added_devices()?)?;
    let mut text =
        String::from("# Devices added by `softroce rdma link add NAME type rxe netdev IF`: NAME netdev IF\n");
    for a in &list {
        text.push_str(&format!("{} netdev {}\n", a.name, a.netdev));
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, text).map_err(werr)?;
    std::fs::rename(&tmp, &path).map_err(werr)
}

/// `rdma link add NAME type rxe netdev IF`: adds a device on `netdev`
/// for this user's later programs. Refused, as the kernel refuses it, for
/// a name a device has, an interface an added device is on, or an
/// interface that does not exist.
pub fn add_device(name: &str, netdev: &str) -> Result<(), ConfigError> {
    if !valid_name(name) {
        return Err(ConfigError::BadAdded {
            path: added_file().unwrap_or_default(),
            line: format!("{name} netdev {netdev}"),
        });
    }
    let ifaddrs = interface_addrs()?;
    let exists = valid_netdev(netdev)
        && (ifaddrs.iter().any(|i| i.interface == netdev) || Path::new("/sys/class/net").join(netdev).exists());
    if !exists {
        return Err(ConfigError::NoInterface(netdev.to_string()));
    }
    if added_addr(netdev, &ifaddrs).is_none() {
        return Err(ConfigError::NoInterface(format!("{netdev} (it has no IP address for the device to bind)")));
    }
    let current = devices()?;
    edit_added(|mut list| {
        if let Some(a) = list.iter().find(|a| a.netdev == netdev) {
            return Err(ConfigError::Exists(format!(
                "{} is already on {netdev} (one device per net device, as rxe)",
                a.name
            )));
        }
        if list.iter().any(|a| a.name == name) || current.iter().any(|d| d.name == name) {
            return Err(ConfigError::Exists(format!("a device named {name} exists")));
        }
        list.push(Added { name: name.to_string(), netdev: netdev.to_string() });
        Ok(list)
    })
}

/// `rdma link delete NAME`: removes a device `link add` made.
pub fn delete_device(name: &str) -> Result<(), ConfigError> {
    edit_added(|mut list| {
        let before = list.len();
        list.retain(|a| a.name != name);
        if list.len() == before {
            return Err(ConfigError::NotAdded(format!(
                "{name} was not added by `rdma link add` (only those can be deleted)"
            )));
        }
        Ok(list)
    })
}

/// A loopback address held for one user of it: no other lease (in any
/// process of this user) gets the same address while this one lives, and
/// its UDP port 4791 was free when it was taken. Two processes on one host
/// need two addresses; `softroce run --loopback` and the tests take them
/// here so that runs side by side never collide.
#[derive(Debug)]
pub struct LoopbackLease {
    addr: std::net::Ipv4Addr,
    _lock: std::fs::File,
}

impl LoopbackLease {
    /// The first 127.0.0.x (x = 2..=254) that no other lease holds and
    /// whose UDP port 4791 is free. Leases are lock files in
    /// `$TMPDIR/softroce-run-UID/`, held until dropped (or the process ends).
    pub fn take() -> std::io::Result<LoopbackLease> {
        let dir = std::env::temp_dir().join(format!("softroce-run-{}", rustix::process::getuid().as_raw()));
        std::fs::create_dir_all(&dir)?;
        for x in 2..=254u8 {
            let addr = std::net::Ipv4Addr::new(127, 0, 0, x);
            let f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(dir.join(format!("{addr}.lock")))?;
            if rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
                continue;
            }
            if std::net::UdpSocket::bind((addr, roce_wire::ROCE_V2_UDP_PORT)).is_ok() {
                return Ok(LoopbackLease { addr, _lock: f });
            }
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            "no free loopback address in 127.0.0.2..=127.0.0.254 (UDP port 4791 taken on all)",
        ))
    }

    /// The address.
    pub fn addr(&self) -> std::net::Ipv4Addr {
        self.addr
    }

    /// The device on the address ([`DeviceInfo::loopback`]).
    pub fn device(&self) -> Result<DeviceInfo, ConfigError> {
        DeviceInfo::loopback(self.addr.octets()[3])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn rxe_active_mtu() {
        // rxe-devinfo: a 1500-byte NIC gives active_mtu 1024; loopback 65536 gives 4096.
        assert_eq!(active_mtu_for(1500), Mtu::Mtu1024);
        assert_eq!(active_mtu_for(9000), Mtu::Mtu4096);
        assert_eq!(active_mtu_for(65536), Mtu::Mtu4096);
        assert_eq!(active_mtu_for(4176), Mtu::Mtu4096);
        assert_eq!(active_mtu_for(4175), Mtu::Mtu2048);
        assert_eq!(active_mtu_for(576), Mtu::Mtu256);
    }

    #[test]
    fn a_devices_active_and_wide_mtus_follow_its_link() {
        let dev = |link_mtu: u32, addr: &str| DeviceInfo {
            name: "d".into(),
            addr: addr.parse().unwrap(),
            interface: None,
            gids: vec![addr.parse().unwrap()],
            bindable: vec![true],
            link_mtu,
        };
        let (a, b) = (dev(1500, "192.0.2.1"), dev(9000, "192.0.2.1"));
        assert_eq!((a.active_mtu(), a.wide_mtu().map(WideMtu::bytes)), (Mtu::Mtu1024, Some(1436)));
        assert_eq!((b.active_mtu(), b.wide_mtu().map(WideMtu::bytes)), (Mtu::Mtu4096, Some(8936)));
        assert_eq!(
            dev(1500, "2001:db8::1").wide_mtu().map(WideMtu::bytes),
            Some(1416),
            "IPv6's header is 20 bytes longer"
        );
    }

    #[test]
    fn device_lists_parse_and_reject_with_reasons() {
        let l = parse_device_list("env", "a=127.0.0.2, b = 127.0.0.3 ,").unwrap();
        assert_eq!(l, [("a".into(), "127.0.0.2".parse().unwrap()), ("b".into(), "127.0.0.3".parse().unwrap())]);
        let e = parse_device_list("env", "a=127.0.0.300").unwrap_err().to_string();
        assert!(e.contains("a=127.0.0.300") && e.contains("NAME=ADDR"), "{e}");
        assert!(matches!(parse_device_list("env", "a=::1,a=::2"), Err(ConfigError::DuplicateName { .. })));
        assert!(parse_device_list("env", "=1.2.3.4").is_err());
        let f = parse_config_file("f", "# devices\nsr0 = 10.0.0.1  # eth0\n\nsr1=fe80::1\n").unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f[1].1, "fe80::1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn added_devices_parse_and_take_their_interfaces_place() {
        let p = Path::new("added");
        let a = parse_added(p, "# x\nrxe0 netdev eth0  # note\n\nrxe1 netdev lo\n").unwrap();
        assert_eq!(
            a,
            [Added { name: "rxe0".into(), netdev: "eth0".into() }, Added { name: "rxe1".into(), netdev: "lo".into() }]
        );
        for bad in
            ["rxe0 eth0", "rxe0 netdev", "rxe0 netdev eth0 x", "rxe0 netdev a/b", "rxe0 netdev waytoolonginterface"]
        {
            assert!(matches!(parse_added(p, bad), Err(ConfigError::BadAdded { .. })), "{bad}");
        }
        assert!(matches!(parse_added(p, "a netdev x\na netdev y"), Err(ConfigError::DuplicateName { .. })));
        let ifs = vec![
            IfAddr { interface: "eth0".into(), addr: "fe80::1".parse().unwrap(), up: true },
            IfAddr { interface: "eth0".into(), addr: "10.0.0.2".parse().unwrap(), up: true },
            IfAddr { interface: "lo".into(), addr: "127.0.0.1".parse().unwrap(), up: true },
            IfAddr { interface: "v6".into(), addr: "fe80::2".parse().unwrap(), up: true },
            IfAddr { interface: "v6".into(), addr: "2001:db8::2".parse().unwrap(), up: true },
            IfAddr { interface: "none".into(), addr: "fe80::3".parse().unwrap(), up: true },
        ];
        let mut out = automatic_devices(&ifs);
        let names = |o: &[DeviceInfo]| o.iter().map(|d| d.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&out), ["softroce_eth0", "softroce_lo"]);
        let add = |n: &str, i: &str| Added { name: n.into(), netdev: i.into() };
        with_added(&mut out, &[add("rxe0", "eth0"), add("rxe6", "v6"), add("gone", "none"), add("x", "nope")], &ifs);
        // rxe0 replaces eth0's device in its place; v6 goes before loopback;
        // an interface without a usable address or gone lists nothing.
        assert_eq!(names(&out), ["rxe0", "rxe6", "softroce_lo"]);
        assert_eq!(out[0].addr, "10.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(out[1].addr, "2001:db8::2".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn gid_table_is_ordered_as_rxe_orders_it() {
        let ifs = vec![
            IfAddr { interface: "eth0".into(), addr: "10.77.0.2".parse().unwrap(), up: true },
            IfAddr { interface: "eth0".into(), addr: "fe80::5054:ff:fe77:2".parse().unwrap(), up: true },
            IfAddr { interface: "eth0".into(), addr: "2001:db8::2".parse().unwrap(), up: true },
            IfAddr { interface: "lo".into(), addr: "127.0.0.1".parse().unwrap(), up: true },
            IfAddr { interface: "lo".into(), addr: "::1".parse().unwrap(), up: true },
        ];
        let d = device_for("sr0".into(), "10.77.0.2".parse().unwrap(), &ifs);
        let want: Vec<IpAddr> =
            ["fe80::5054:ff:fe77:2", "10.77.0.2", "2001:db8::2"].iter().map(|s| s.parse().unwrap()).collect();
        assert_eq!(d.gids, want);
        assert_eq!(d.addr_gid_index(), 1, "the IPv4 GID is index 1, as with rxe");
        assert_eq!(d.interface.as_deref(), Some("eth0"));
        assert_eq!(d.bindable, [true, true, true], "every GID is an address of eth0");
        // 127.0.0.2 is on loopback though not listed; GID 0 is made from the GUID.
        let d = device_for("lo2".into(), IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), &ifs);
        assert_eq!(d.interface.as_deref(), Some("lo"));
        assert_eq!(d.gids.len(), 2);
        assert!(is_link_local(&d.gids[0]));
        assert_eq!(d.gids[1], IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)));
        assert_eq!(d.bindable, [false, true]);
        // `::1` is no GID of a loopback device: none receives it.
        let d = device_for("softroce_lo".into(), IpAddr::V4(Ipv4Addr::LOCALHOST), &ifs);
        assert_eq!(d.gids.len(), 2, "{:?}", d.gids);
    }

    /// Names UCX can hold: `softroce_<if>` where it fits 15 characters,
    /// else `sr_<if>` cut to fit, unique. UCX cut `softroce_enp0s31f6` to
    /// `softroce_enp0s3`, found no such device and dropped it.
    #[test]
    fn device_names_fit_ucxs_fifteen_characters_and_stay_unique() {
        assert_eq!(device_name("lo", &[]), "softroce_lo");
        assert_eq!(device_name("eth0", &[]), "softroce_eth0");
        assert_eq!(device_name("ens160", &[]), "softroce_ens160");
        assert_eq!(device_name("enp0s31f6", &[]), "sr_enp0s31f6");
        assert_eq!(device_name("docker0", &[]), "sr_docker0");
        assert_eq!(device_name("enp65s0f0np0", &[]), "sr_enp65s0f0np0");
        // Interface names are up to 15 characters: cut, then numbered on a clash.
        assert_eq!(device_name("enp129s0f0np0", &[]), "sr_enp129s0f0np");
        assert_eq!(device_name("enp129s0f0np1", &["sr_enp129s0f0np"]), "sr_enp129s0f0n2");
        assert_eq!(device_name("enp129s0f0np2", &["sr_enp129s0f0np", "sr_enp129s0f0n2"]), "sr_enp129s0f0n3");
        for i in ["a", "abcdefghijklmno", "veth1234567890", "n\u{e9}t\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}"] {
            assert!(device_name(i, &[]).len() <= MAX_NAME_LEN, "{i}");
        }
    }

    #[test]
    fn this_host_has_a_loopback_device() {
        // Zero configuration: loopback always has 127.0.0.1 (unless the
        // environment names devices).
        if crate::env::os(crate::env::DEVICES).is_some() || config_file().is_some() {
            return;
        }
        let d = devices().unwrap();
        let lo = d.iter().find(|d| d.addr == IpAddr::V4(Ipv4Addr::LOCALHOST)).expect("a loopback device");
        assert_eq!(lo.name, format!("softroce_{}", lo.interface.as_deref().unwrap()));
        assert!(d.iter().all(|d| d.name.len() <= MAX_NAME_LEN), "{d:?}");
        assert_eq!(lo.active_mtu(), Mtu::Mtu4096, "loopback MTU 65536");
        assert_eq!(lo.addr_gid_index(), 1);
        // Loopback last: the default device is one another host can reach.
        let at = d.iter().position(|d| d.addr.is_loopback()).expect("listed");
        assert!(d[at..].iter().all(|d| d.addr.is_loopback()), "{:?}", d.iter().map(|d| &d.name).collect::<Vec<_>>());
    }
}
