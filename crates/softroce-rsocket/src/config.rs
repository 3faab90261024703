//! rsockets' defaults and the administrator's files that change them
//! (`/etc/rdma/rsocket/*`, rsocket(7)): each holds one integer, read once
//! per process when the first rsocket is made. A missing or unreadable
//! file leaves rsockets' built-in value.

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use super::stream::SNDLOWAT;
use super::wire::round_iomap_size;

/// Debian's `@CMAKE_INSTALL_FULL_SYSCONFDIR@/rdma/rsocket`.
pub const CONF_DIR: &str = "/etc/rdma/rsocket";

/// The defaults new rsockets take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Defaults {
    /// `polling_time`: how long a blocking call polls before it sleeps (10 us).
    pub polling_time: Duration,
    /// `wake_up_interval`: the longest a wait sleeps before looking again (500 ms).
    pub wake_up_interval: Duration,
    /// `inline_default` (64).
    pub inline: u16,
    /// `sqsize_default` (384).
    pub sq: u16,
    /// `rqsize_default` (384).
    pub rq: u16,
    /// `mem_default`: the receive ring (128 KiB).
    pub mem: u32,
    /// `wmem_default`: the send buffer (128 KiB).
    pub wmem: u32,
    /// `iomap_size` (0: no remote io mappings).
    pub iomap: u16,
}

impl Default for Defaults {
    fn default() -> Defaults {
        Defaults {
            polling_time: Duration::from_micros(10),
            wake_up_interval: Duration::from_millis(500),
            inline: 64,
            sq: 384,
            rq: 384,
            mem: 1 << 17,
            wmem: 1 << 17,
            iomap: 0,
        }
    }
}

/// The first integer in a file (as `fscanf("%u")` reads it), if any.
fn read_int(dir: &Path, name: &str) -> Option<i64> {
    let text = std::fs::read_to_string(dir.join(name)).ok()?;
    let t = text.trim_start();
    let end = t.char_indices().find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && (c == '-' || c == '+'))));
    t[..end.map_or(t.len(), |(i, _)| i)].parse().ok()
}

impl Defaults {
    /// rsockets' values, changed by the files in `dir` (`rs_configure`): the
    /// 16-bit ones cut to 16 bits as `%hu` reads them, `mem_default` at least
    /// 1, `wmem_default` at least `2 * SNDLOWAT` when below `SNDLOWAT`, and
    /// the iomap size rounded to what its 8-bit scale can say.
    pub fn load(dir: &Path) -> Defaults {
        let mut d = Defaults::default();
        let u16_of = |v: i64| v as u16;
        if let Some(v) = read_int(dir, "polling_time") {
            d.polling_time = Duration::from_micros(v as u32 as u64);
        }
        if let Some(v) = read_int(dir, "wake_up_interval")
            && v > 0
        {
            d.wake_up_interval = Duration::from_millis(v as u64);
        }
        if let Some(v) = read_int(dir, "inline_default") {
            d.inline = u16_of(v);
        }
        if let Some(v) = read_int(dir, "sqsize_default") {
            d.sq = u16_of(v);
        }
        if let Some(v) = read_int(dir, "rqsize_default") {
            d.rq = u16_of(v);
        }
        if let Some(v) = read_int(dir, "mem_default") {
            d.mem = (v as u32).max(1);
        }
        if let Some(v) = read_int(dir, "wmem_default") {
            d.wmem = v as u32;
            if d.wmem < SNDLOWAT {
                d.wmem = SNDLOWAT << 1;
            }
        }
        if let Some(v) = read_int(dir, "iomap_size") {
            d.iomap = round_iomap_size(u32::from(u16_of(v)));
        }
        d
    }
}

/// The process's defaults (read from [`CONF_DIR`] on first use).
pub fn defaults() -> &'static Defaults {
    static D: OnceLock<Defaults> = OnceLock::new();
    D.get_or_init(|| Defaults::load(Path::new(CONF_DIR)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_files_the_defaults_are_rsockets_own() {
        let d = Defaults::load(Path::new("/nonexistent/rsocket"));
        assert_eq!(d, Defaults::default());
        assert_eq!((d.sq, d.rq, d.inline, d.mem, d.wmem, d.iomap), (384, 384, 64, 131072, 131072, 0));
    }

    #[test]
    fn each_file_changes_its_value_with_rsockets_limits() {
        let dir = std::env::temp_dir().join(format!("softroce-rsocket-conf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (f, v) in [
            ("mem_default", "0\n"),
            ("wmem_default", "100"),
            ("sqsize_default", "70000"),
            ("rqsize_default", " 128 junk"),
            ("inline_default", "not a number"),
            ("iomap_size", "300"),
            ("polling_time", "50"),
            ("wake_up_interval", "-1"),
        ] {
            std::fs::write(dir.join(f), v).unwrap();
        }
        let d = Defaults::load(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(d.mem, 1, "at least 1");
        assert_eq!(d.wmem, 4096, "below SNDLOWAT: twice SNDLOWAT");
        assert_eq!(d.sq, 70000u32 as u16, "%hu cuts to 16 bits");
        assert_eq!(d.rq, 128);
        assert_eq!(d.inline, 64, "unreadable: the default stays");
        assert_eq!(d.iomap, 256, "rounded to the 8-bit scale");
        assert_eq!(d.polling_time, Duration::from_micros(50));
        assert_eq!(d.wake_up_interval, Duration::from_millis(500), "not positive: the default stays");
    }
}
