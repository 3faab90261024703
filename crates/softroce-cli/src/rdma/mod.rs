//! `softroce rdma`: iproute2's `rdma` tool for softroce devices.
//!
//! iproute2's `rdma` asks the kernel over netlink (NETLINK_RDMA), which
//! knows no softroce device, so scripts written for kernel rxe (`rdma link
//! add rxe0 type rxe netdev eth0`, `rdma link show -j`) fail under
//! softroce. This answers the same commands from softroce's device list,
//! the device files every process shares (`roce_host::resources`), and the
//! added-devices file (`softroce::config::add_device`), with iproute2
//! 6.1's options, text and JSON (`docs/rdma-tool.md`). `softroce run`
//! puts it first on the program's PATH as `rdma`.
//!
//! Where the kernel has RDMA devices too (the real `rdma` is installed and
//! NETLINK_RDMA answers), the real tool still answers for them: a command
//! naming a device softroce does not know is handed to it, and `show`
//! without a device prints its entries first, then softroce's.

use std::process::ExitCode;

use softroce::config::DeviceInfo;

mod dev;
mod link;
pub mod output;
mod res;
mod stat;

/// iproute2's options (`rdma.c`).
#[derive(Debug, Default, Clone, Copy)]
pub struct Opts {
    /// `-j`.
    pub json: bool,
    /// `-p`.
    pub pretty: bool,
    /// `-d` (`-dd`: driver details, which softroce has none of).
    pub details: bool,
}

/// What a command gives back: iproute2 exits 1 on any error it reports,
/// and 0 after "Unknown ..." messages (`rd_exec_cmd` returns 0 there).
pub enum Outcome {
    /// Done (its output written).
    Done,
    /// An error, already reported on stderr.
    Failed,
    /// A device softroce does not know: the real `rdma` may know it.
    NotMine,
}

/// One softroce device as `rdma` shows it.
pub struct Dev {
    /// Its index (its position in the device list, as the kernel numbers
    /// IB devices from 0).
    pub index: u32,
    /// The device.
    pub info: DeviceInfo,
}

impl Dev {
    /// The interface's index (`/sys/class/net/IF/ifindex`).
    pub fn netdev_index(&self) -> Option<u32> {
        let i = self.info.interface.as_deref()?;
        std::fs::read_to_string(format!("/sys/class/net/{i}/ifindex")).ok()?.trim().parse().ok()
    }

    /// Whether the interface is up with a carrier (rxe's port state
    /// follows it: ACTIVE/LINK_UP, else DOWN/DISABLED). Without a known
    /// interface (an address on none), up.
    pub fn up(&self) -> bool {
        let Some(i) = self.info.interface.as_deref() else { return true };
        let read = |f: &str| std::fs::read_to_string(format!("/sys/class/net/{i}/{f}")).ok();
        let flags = read("flags").and_then(|f| u32::from_str_radix(f.trim().trim_start_matches("0x"), 16).ok());
        // IFF_UP, and a carrier (the file cannot be read while down).
        flags.is_some_and(|f| f & 1 != 0) && read("carrier").is_some_and(|c| c.trim() == "1")
    }
}

/// The device list, or the reason on stderr.
fn devices() -> Result<Vec<Dev>, ExitCode> {
    match softroce::config::devices() {
        Ok(d) => Ok(d.into_iter().zip(0u32..).map(|(info, index)| Dev { index, info }).collect()),
        Err(e) => {
            eprintln!("softroce rdma: {e}");
            Err(ExitCode::FAILURE)
        }
    }
}

/// iproute2's `strcmpx`: `arg` names `word` if it is a prefix of it.
pub fn is(arg: &str, word: &str) -> bool {
    word.starts_with(arg)
}

/// `DEV[/PORT]` as `get_port_from_argv` reads it: `(dev, port, all ports)`;
/// `None` for a port that is not a number (or `-`).
pub fn dev_port(arg: &str) -> Option<(&str, u32, bool)> {
    match arg.rsplit_once('/') {
        None => Some((arg, 0, true)),
        Some((d, "")) => Some((d, 0, true)),
        Some((d, "-")) => Some((d, 0, false)),
        Some((d, p)) => {
            let n: u32 = p.parse().ok()?;
            (n != 0).then_some((d, n, false))
        }
    }
}

const USAGE: &str = "Usage: rdma [ OPTIONS ] OBJECT { COMMAND | help }\n       rdma [ -f[orce] ] -b[atch] filename\n\
where  OBJECT := { dev | link | resource | system | statistic | help }\n       \
OPTIONS := { -V[ersion] | -d[etails] | -j[son] | -p[retty] -r[aw]}\n";

/// The command line, for the real `rdma` (see [`emit`]).
static ARGS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// Runs `rdma ARGS` (without the program name).
pub fn run(args: &[String]) -> ExitCode {
    let _ = ARGS.set(args.to_vec());
    let mut opts = Opts::default();
    let mut rest = Vec::new();
    let mut iter = args.iter();
    // GNU getopt_long: options anywhere before `--`, short ones combined.
    while let Some(a) = iter.next() {
        if a == "--" {
            rest.extend(iter.by_ref().cloned());
            break;
        }
        if let Some(long) = a.strip_prefix("--") {
            let all = ["version", "help", "json", "pretty", "details", "raw", "force", "batch"];
            let found: Vec<&str> = all.iter().copied().filter(|o| o.starts_with(long)).collect();
            match found[..] {
                [o] => match o {
                    "version" => return version(),
                    "help" => return help(),
                    "json" => opts.json = true,
                    "pretty" => opts.pretty = true,
                    "details" => opts.details = true,
                    "raw" | "force" => {}
                    _ => return unsupported("batch mode (-b)"),
                },
                _ => {
                    eprintln!("Unknown option.");
                    eprint!("{USAGE}");
                    return ExitCode::FAILURE;
                }
            }
        } else if let Some(short) = a.strip_prefix('-').filter(|s| !s.is_empty()) {
            for c in short.chars() {
                match c {
                    'V' => return version(),
                    'h' => return help(),
                    'j' => opts.json = true,
                    'p' => opts.pretty = true,
                    'd' => opts.details = true,
                    'r' | 'f' => {}
                    'b' => return unsupported("batch mode (-b)"),
                    _ => {
                        eprintln!("Unknown option.");
                        eprint!("{USAGE}");
                        return ExitCode::FAILURE;
                    }
                }
            }
        } else {
            rest.push(a.clone());
        }
    }
    let outcome = dispatch(&opts, &rest);
    match outcome {
        Outcome::Done => ExitCode::SUCCESS,
        Outcome::Failed => ExitCode::FAILURE,
        Outcome::NotMine => match real::rdma() {
            Some(real) => real::exec(&real, args),
            None => ExitCode::FAILURE,
        },
    }
}

fn version() -> ExitCode {
    println!("rdma utility, softroce-{} (iproute2-6.1.0's commands)", env!("CARGO_PKG_VERSION"));
    ExitCode::SUCCESS
}

fn help() -> ExitCode {
    print!("{USAGE}");
    ExitCode::SUCCESS
}

fn unsupported(what: &str) -> ExitCode {
    eprintln!("softroce rdma: {what} is not supported");
    ExitCode::FAILURE
}

/// Prints iproute2's complaint about an unknown word (and succeeds, as it does).
pub fn unknown(what: &str, arg: &str) -> Outcome {
    eprintln!("Unknown {what} '{arg}'.");
    Outcome::Done
}

fn dispatch(opts: &Opts, args: &[String]) -> Outcome {
    let Some((obj, rest)) = args.split_first() else {
        print!("{USAGE}");
        return Outcome::Done;
    };
    let Ok(devs) = devices() else { return Outcome::Failed };
    // `rd_cmd`'s table order decides a prefix shared by two objects.
    if is(obj, "help") {
        print!("{USAGE}");
        Outcome::Done
    } else if is(obj, "dev") {
        dev::cmd(opts, &devs, rest)
    } else if is(obj, "link") {
        link::cmd(opts, &devs, rest)
    } else if is(obj, "resource") {
        res::cmd(opts, &devs, rest)
    } else if is(obj, "system") {
        match real::rdma() {
            Some(_) => Outcome::NotMine,
            None => {
                eprintln!("softroce rdma: `rdma system` is the kernel's RDMA subsystem, which softroce does not use");
                Outcome::Failed
            }
        }
    } else if is(obj, "statistic") {
        stat::cmd(opts, &devs, rest)
    } else {
        unknown("object", obj)
    }
}

/// Writes `out`, after the real `rdma`'s entries when the command lists
/// every device (`args_all_devices`) and the kernel has RDMA.
pub fn emit(out: output::Out, args_all_devices: bool) -> Outcome {
    let json = out.is_json();
    let ours = out.finish();
    let theirs = if args_all_devices { real::listing() } else { None };
    match theirs {
        Some(t) if json => print!("{}", real::merge_json(&t, &ours)),
        Some(t) => print!("{t}{ours}"),
        None => print!("{ours}"),
    }
    Outcome::Done
}

/// The device named `name`, or iproute2's complaint, or [`Outcome::NotMine`]
/// when the kernel may have it.
pub fn find<'a>(devs: &'a [Dev], name: &str, complaint: &str) -> Result<&'a Dev, Outcome> {
    if let Some(d) = devs.iter().find(|d| d.info.name == name) {
        return Ok(d);
    }
    if real::rdma().is_some() {
        return Err(Outcome::NotMine);
    }
    eprintln!("{complaint}");
    Err(Outcome::Failed)
}

/// The real (iproute2) `rdma`, when the kernel has RDMA.
pub mod real {
    use std::path::{Path, PathBuf};
    use std::process::ExitCode;

    /// iproute2's `rdma`: the first on PATH that is not this program (the
    /// shim `softroce run` puts first is a link to it), else the usual
    /// places; only when NETLINK_RDMA answers (the kernel has RDMA).
    pub fn rdma() -> Option<PathBuf> {
        if softroce::env::off(softroce::env::RDMA_REAL) {
            return None;
        }
        let me = std::env::current_exe().ok().and_then(|p| std::fs::canonicalize(p).ok());
        let path = std::env::var_os("PATH").unwrap_or_default();
        let found = std::env::split_paths(&path)
            .map(|d| d.join("rdma"))
            .chain(["/usr/sbin/rdma", "/sbin/rdma", "/usr/bin/rdma", "/bin/rdma"].map(PathBuf::from))
            .find(|p| p.is_file() && std::fs::canonicalize(p).ok() != me && !is_shim(p))?;
        netlink_rdma().then_some(found)
    }

    /// Whether `p` is a shim that runs softroce (a script naming it).
    fn is_shim(p: &Path) -> bool {
        std::fs::read(p).is_ok_and(|b| b.len() < 4096 && b.starts_with(b"#!") && b.windows(8).any(|w| w == b"softroce"))
    }

    /// Whether a NETLINK_RDMA socket opens (the kernel's ib_core is there;
    /// netlink takes SOCK_DGRAM as SOCK_RAW).
    fn netlink_rdma() -> bool {
        const AF_NETLINK: i32 = 16;
        const NETLINK_RDMA: i32 = 20;
        socket2::Socket::new(socket2::Domain::from(AF_NETLINK), socket2::Type::DGRAM, Some(NETLINK_RDMA.into())).is_ok()
    }

    /// Runs the real `rdma` with `args`; its status becomes ours.
    pub fn exec(real: &Path, args: &[String]) -> ExitCode {
        match std::process::Command::new(real).args(args).status() {
            Ok(s) => ExitCode::from(s.code().unwrap_or(1).clamp(0, 255) as u8),
            Err(e) => {
                eprintln!("softroce rdma: cannot run {}: {e}", real.display());
                ExitCode::FAILURE
            }
        }
    }

    /// What the real `rdma` prints for this command line (stdout), when
    /// there is one and it succeeds.
    pub fn listing() -> Option<String> {
        let real = rdma()?;
        let args = super::ARGS.get()?;
        let out = std::process::Command::new(real).args(args).stderr(std::process::Stdio::null()).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Two iproute2 JSON arrays as one (either may be empty).
    pub fn merge_json(theirs: &str, ours: &str) -> String {
        let (t, o) = (theirs.trim_end(), ours.trim_end());
        let inner = |s: &str| {
            let s = s.trim();
            let s = s.strip_prefix('[').unwrap_or(s).strip_suffix(']').unwrap_or(s);
            s.trim_matches(' ').to_string()
        };
        let (ti, oi) = (inner(t), inner(o));
        let pretty = o.starts_with("[ ") || t.starts_with("[ ");
        let (open, close) = if pretty { ("[ ", " ]") } else { ("[", "]") };
        match (ti.is_empty(), oi.is_empty()) {
            (true, true) => format!("{}\n", if pretty { "[ ]" } else { "[]" }),
            (false, true) => format!("{open}{ti}{close}\n"),
            (true, false) => format!("{open}{oi}{close}\n"),
            (false, false) => format!("{open}{ti},{oi}{close}\n"),
        }
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn json_arrays_merge_as_iproute2_would_print_them() {
            assert_eq!(super::merge_json("[{\"a\":1}]\n", "[{\"b\":2}]\n"), "[{\"a\":1},{\"b\":2}]\n");
            assert_eq!(super::merge_json("[]\n", "[{\"b\":2}]\n"), "[{\"b\":2}]\n");
            assert_eq!(super::merge_json("[ {\n    } ]\n", "[ ]\n"), "[ {\n    } ]\n");
            assert_eq!(
                super::merge_json("[ {\n        \"a\": 1\n    } ]\n", "[ {\n        \"b\": 2\n    } ]\n"),
                "[ {\n        \"a\": 1\n    },{\n        \"b\": 2\n    } ]\n"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::dev_port;

    #[test]
    fn dev_port_reads_as_iproute2_reads_it() {
        assert_eq!(dev_port("rxe0"), Some(("rxe0", 0, true)));
        assert_eq!(dev_port("rxe0/"), Some(("rxe0", 0, true)));
        assert_eq!(dev_port("rxe0/1"), Some(("rxe0", 1, false)));
        assert_eq!(dev_port("rxe0/-"), Some(("rxe0", 0, false)));
        assert_eq!(dev_port("rxe0/0"), None);
        assert_eq!(dev_port("rxe0/x"), None);
        assert!(super::is("sh", "show") && super::is("show", "show") && !super::is("shows", "show"));
    }
}
