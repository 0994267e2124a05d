//! `redbell completions SHELL` and `redbell man`: a shell completion script
//! (`clap_complete`) and a man page (`clap_mangen`), both generated from the
//! clap definition `--help` prints, so neither can drift from it. The
//! hidden guardian subcommand (`__guard`) is not in the man page; the shells'
//! generators still offer it (clap_complete lists hidden subcommands).

use std::io::Write;
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

use crate::fail;

/// `redbell completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum)]
    shell: Shell,
}

/// Prints the completion script of `C`'s command for `args.shell`.
pub fn completions<C: CommandFactory>(args: &CompletionsArgs) -> ExitCode {
    let mut command = C::command();
    let name = command.get_name().to_owned();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command, name, &mut out);
    print(&out)
}

/// Prints the man page of `C`'s command (roff, section 1).
pub fn man<C: CommandFactory>() -> ExitCode {
    let mut out = Vec::new();
    match clap_mangen::Man::new(C::command()).render(&mut out) {
        Ok(()) => print(&out),
        Err(e) => {
            eprintln!("redbell: cannot render the man page: {e}");
            ExitCode::from(fail::EX_FAILURE)
        }
    }
}

/// Writes `bytes` to stdout; a closed pipe (`| head`) is not an error.
fn print(bytes: &[u8]) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("redbell: cannot write to stdout: {e}");
            ExitCode::from(fail::EX_FAILURE)
        }
    }
}
