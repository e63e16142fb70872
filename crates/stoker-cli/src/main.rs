//! The `stoker` command (see the library for what it does).

use std::process::ExitCode;

/// The same allocator as the Python extension, so `stoker bench` measures what Python runs.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    default_sigpipe();
    ExitCode::from(stoker_cli::run(std::env::args_os()))
}

/// Output into a closed pipe (`stoker inspect ... | head -1`) ends the process quietly, as it
/// does a C program, instead of failing the write (a panic in `println!`).
#[cfg(unix)]
fn default_sigpipe() {
    // SAFETY: called first thing in `main`, before any other thread exists; it only puts the
    // disposition of SIGPIPE back to the default that Rust's runtime changed to "ignore".
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(not(unix))]
fn default_sigpipe() {}
