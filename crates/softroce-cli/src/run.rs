//! `softroce run`: runs an unmodified libibverbs program over softroce.
//!
//! The program finds softroce's `libibverbs.so.1` and `librdmacm.so.1`
//! (one library under both names) first on its library path, and the
//! devices named here in `SOFTROCE_DEVICES`. Any number of processes share
//! the host's devices; `--loopback` picks a free 127.0.0.x for a run that
//! wants a device of its own and holds it (a lock file) until the program
//! exits.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

/// `softroce run` options.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// A device for the program: NAME=ADDR (repeatable; replaces the
    /// configured devices, as SOFTROCE_DEVICES does).
    #[arg(long = "device", value_name = "NAME=ADDR")]
    devices: Vec<String>,
    /// Give the program one device, softroce_lo, on a free 127.0.0.x (for
    /// several processes on one host).
    #[arg(long, conflicts_with = "devices")]
    loopback: bool,
    /// Print the directory holding softroce's libibverbs.so.1 (for
    /// LD_LIBRARY_PATH by hand) and exit.
    #[arg(long, exclusive = true)]
    print_libdir: bool,
    /// The program and its arguments.
    #[arg(last = true, value_name = "PROGRAM [ARGS]")]
    command: Vec<String>,
}

/// The cdylib cargo builds beside the `softroce` binary.
const CDYLIB: &str = "libsoftroce_ibverbs.so";

/// A directory with `libibverbs.so.1` pointing at softroce's library:
/// `<dir of softroce>/softroce-ibverbs/`, or under the temp dir when that
/// is not writable.
pub fn libdir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the softroce binary: {e}"))?;
    let bin_dir = exe.parent().ok_or("the softroce binary has no directory")?;
    // `cargo build` puts the library beside the binary; `cargo test` leaves
    // its newest copy in deps/ only: take the newer.
    let newest = [bin_dir.join(CDYLIB), bin_dir.join("deps").join(CDYLIB)]
        .into_iter()
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max_by_key(|(t, _)| *t);
    let lib = newest.map_or_else(|| bin_dir.join(CDYLIB), |(_, p)| p);
    if !lib.is_file() {
        return Err(format!(
            "{} is missing: build it with `cargo build --release -p softroce-ibverbs` \
             (cargo builds it as a library of its own, not as a dependency of softroce)",
            lib.display()
        ));
    }
    let uid = rustix::process::getuid().as_raw();
    let candidates = [bin_dir.join("softroce-ibverbs"), std::env::temp_dir().join(format!("softroce-ibverbs-{uid}"))];
    let mut last_err = String::new();
    for dir in candidates {
        match link_into(&dir, &lib) {
            Ok(()) => return Ok(dir),
            Err(e) => last_err = format!("{}: {e}", dir.display()),
        }
    }
    Err(format!("cannot make a directory for libibverbs.so.1: {last_err}"))
}

/// The names the library serves: libibverbs, and librdmacm (the same file:
/// the loader, finding it loaded, satisfies both; see the library's rdmacm.rs).
const NAMES: [&str; 2] = ["libibverbs.so.1", "librdmacm.so.1"];

fn link_into(dir: &Path, lib: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let target = std::fs::canonicalize(lib)?;
    for name in NAMES {
        let link = dir.join(name);
        if std::fs::canonicalize(&link).ok().as_deref() == Some(target.as_path()) {
            continue;
        }
        // Replace atomically: a concurrent run may read the link meanwhile.
        let tmp = dir.join(format!(".{name}.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(lib, &tmp)?;
        std::fs::rename(&tmp, &link)?;
    }
    Ok(())
}

/// Runs the command; its exit status becomes ours.
pub fn run(args: &RunArgs) -> ExitCode {
    match run_inner(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("softroce run: {e}");
            ExitCode::from(2)
        }
    }
}

fn run_inner(args: &RunArgs) -> Result<ExitCode, String> {
    let dir = libdir()?;
    if args.print_libdir {
        println!("{}", dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    let Some((prog, rest)) = args.command.split_first() else {
        return Err("no program given: softroce run [OPTIONS] -- PROGRAM [ARGS]".into());
    };
    for d in &args.devices {
        softroce::config::parse_device_list("--device", d).map_err(|e| e.to_string())?;
    }
    let mut cmd = std::process::Command::new(prog);
    cmd.args(rest);
    let path = match std::env::var_os("LD_LIBRARY_PATH") {
        Some(old) if !old.is_empty() => {
            let mut p = dir.clone().into_os_string();
            p.push(":");
            p.push(old);
            p
        }
        _ => dir.clone().into_os_string(),
    };
    cmd.env("LD_LIBRARY_PATH", path);
    // iproute2's `rdma` for softroce's devices first on PATH (a link to
    // this binary, which runs `softroce rdma` when called so).
    match rdma_shim_dir() {
        Ok(d) => {
            let mut p = d.into_os_string();
            if let Some(old) = std::env::var_os("PATH").filter(|o| !o.is_empty()) {
                p.push(":");
                p.push(old);
            }
            cmd.env("PATH", p);
        }
        Err(e) => eprintln!("softroce run: no `rdma` for softroce's devices on PATH: {e}"),
    }
    let _held = if args.loopback {
        let h = softroce::config::LoopbackLease::take().map_err(|e| e.to_string())?;
        cmd.env("SOFTROCE_DEVICES", format!("softroce_lo={}", IpAddr::V4(h.addr())));
        Some(h)
    } else {
        None
    };
    if !args.devices.is_empty() {
        cmd.env("SOFTROCE_DEVICES", args.devices.join(","));
    }
    if crate::view::wanted() {
        // The program's devices, as its libibverbs will list them.
        let devices = match (&_held, args.devices.is_empty()) {
            // Named as SOFTROCE_DEVICES names it above (not softroce_loX).
            (Some(h), _) => softroce::config::DeviceInfo::on_address("softroce_lo", IpAddr::V4(h.addr()))
                .map(|d| vec![d])
                .map_err(|e| e.to_string()),
            (None, false) => args
                .devices
                .iter()
                .flat_map(|d| softroce::config::parse_device_list("--device", d).unwrap_or_default())
                .map(|(n, a)| softroce::config::DeviceInfo::on_address(n, a).map_err(|e| e.to_string()))
                .collect(),
            (None, true) => softroce::devices().map_err(|e| e.to_string()),
        };
        if let Ok(d) = &devices {
            let long: Vec<&str> =
                d.iter().map(|d| d.name.as_str()).filter(|n| n.len() > softroce::config::MAX_NAME_LEN).collect();
            if !long.is_empty() {
                eprintln!(
                    "softroce run: UCX (and so Open MPI's UCX PML) leaves out RDMA devices whose names are longer \
                     than {} characters: {}",
                    softroce::config::MAX_NAME_LEN,
                    long.join(", ")
                );
            }
        }
        let view = match devices {
            Ok(d) => crate::view::enter(&d),
            Err(e) => crate::view::View::None(format!("listing the devices: {e}")),
        };
        if let Some(w) = view.warning() {
            eprintln!("{w}");
        }
    }
    let forwarder = crate::forward::Forwarder::catch().map_err(|e| format!("catching signals for {prog}: {e}"))?;
    let mut child = cmd.spawn().map_err(|e| format!("cannot run {prog}: {e}"))?;
    let status = forwarder.wait(&mut child).map_err(|e| format!("waiting for {prog}: {e}"))?;
    Ok(crate::forward::exit_like(status))
}

/// A directory holding `rdma`, a link to this binary (`main` runs
/// `softroce rdma` when called `rdma`): `<dir of softroce>/softroce-bin/`,
/// or under the temp dir when that is not writable.
fn rdma_shim_dir() -> Result<PathBuf, String> {
    let exe =
        std::env::current_exe().and_then(std::fs::canonicalize).map_err(|e| format!("no softroce binary: {e}"))?;
    let bin_dir = exe.parent().ok_or("the softroce binary has no directory")?;
    let uid = rustix::process::getuid().as_raw();
    let mut last_err = String::new();
    for dir in [bin_dir.join("softroce-bin"), std::env::temp_dir().join(format!("softroce-bin-{uid}"))] {
        let link = dir.join("rdma");
        if std::fs::canonicalize(&link).ok().as_deref() == Some(exe.as_path()) {
            return Ok(dir);
        }
        // Replaced atomically: a concurrent run may be starting it.
        let tmp = dir.join(format!(".rdma.{}", std::process::id()));
        let made = std::fs::create_dir_all(&dir)
            .and_then(|()| {
                let _ = std::fs::remove_file(&tmp);
                std::os::unix::fs::symlink(&exe, &tmp)
            })
            .and_then(|()| std::fs::rename(&tmp, &link));
        match made {
            Ok(()) => return Ok(dir),
            Err(e) => last_err = format!("{}: {e}", dir.display()),
        }
    }
    Err(last_err)
}
