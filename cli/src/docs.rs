//! `redbell completions SHELL` and `redbell man`: a shell completion script
//! (`clap_complete`) and a man page (`clap_mangen`), both generated from the
//! clap definition `--help` prints, so neither can drift from it. The
//! hidden guardian subcommand (`__guard`) is not in the man pages; the
//! shells' generators still offer it (clap_complete lists hidden
//! subcommands). `redbell man` prints redbell(1), `redbell man run`
//! redbell-run(1), and so on for each subcommand redbell(1) lists.

use std::io::Write;
use std::process::ExitCode;

use clap::{Command, CommandFactory};
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

/// `redbell man`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Print the page of this subcommand (redbell-SUBCOMMAND(1), which
    /// redbell(1) refers to) instead of redbell(1)
    #[arg(value_name = "SUBCOMMAND")]
    subcommand: Option<String>,
}

/// Prints the man page (roff, section 1) of `C`'s command, or of one of its
/// subcommands.
pub fn man<C: CommandFactory>(args: &ManArgs) -> ExitCode {
    let mut command = with_long_help(C::command()).disable_help_subcommand(true);
    command.build(); // the global options reach the subcommands
    let page = match &args.subcommand {
        None => command,
        Some(name) => match command
            .get_subcommands()
            .find(|s| s.get_name() == name && !s.is_hide_set())
        {
            Some(sub) => sub.clone(),
            None => {
                let names: Vec<&str> = command
                    .get_subcommands()
                    .filter(|s| !s.is_hide_set())
                    .map(|s| s.get_name())
                    .collect();
                eprintln!(
                    "redbell: no subcommand {name:?}; one of: {}",
                    names.join(", ")
                );
                return ExitCode::from(fail::EX_USAGE);
            }
        },
    };
    let mut out = Vec::new();
    match render(&page, &mut out) {
        Ok(()) => print(&out),
        Err(e) => {
            eprintln!("redbell: cannot render the man page: {e}");
            ExitCode::from(fail::EX_FAILURE)
        }
    }
}

/// `command` and its subcommands with every option's help as its long
/// help: `clap_mangen` shows only the long help of an option whose short
/// help is hidden (the Redis options are hidden from `-h`), so without this
/// they would appear in the page without a word.
fn with_long_help(command: Command) -> Command {
    let names: Vec<String> = command
        .get_subcommands()
        .map(|s| s.get_name().to_owned())
        .collect();
    let mut command = command.mut_args(|arg| match (arg.get_long_help(), arg.get_help()) {
        (None, Some(help)) => {
            let help = help.clone();
            arg.long_help(help)
        }
        _ => arg,
    });
    for name in names {
        command = command.mut_subcommand(name, with_long_help);
    }
    command
}

/// The page of `command`: `clap_mangen`'s sections, but the text after the
/// options (exit codes, environment, examples: laid out in columns for
/// `--help`) in a section of its own, kept as laid out (roff would refill
/// its lines and break the columns).
fn render(command: &Command, out: &mut Vec<u8>) -> std::io::Result<()> {
    let after = command
        .get_after_long_help()
        .or_else(|| command.get_after_help())
        .map(|text| text.to_string());
    let man = clap_mangen::Man::new(command.clone().after_help(None).after_long_help(None));
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;
    if command.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(out)?;
    }
    if let Some(text) = after {
        out.extend_from_slice(b".SH NOTES\n.nf\n");
        for line in text.lines() {
            out.extend_from_slice(roff_line(line).as_bytes());
            out.push(b'\n');
        }
        out.extend_from_slice(b".fi\n");
    }
    if command.get_version().is_some() {
        man.render_version_section(out)?;
    }
    Ok(())
}

/// `line` as literal roff text: backslashes and hyphens escaped, and a
/// leading `.` or `'` (a request) made plain text.
fn roff_line(line: &str) -> String {
    let escaped = line.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with(['.', '\'']) {
        format!("\\&{escaped}")
    } else {
        escaped
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
