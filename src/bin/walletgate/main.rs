//! `walletgate`: the command-line client of walletgate services.
//!
//! * `walletgate pay URL` — one paid request to an x402 gateway;
//! * `approve` — the one-time Permit2 approval metered (`upto`) payments need;
//! * `login`, `whoami`, `auth`, `api request`, `mcp-bridge` — the data API
//!   commands (sign in with a wallet, keep its JWT, call the API);
//! * `facilitator` — the standard facilitator API, settling on chain with
//!   walletgate's own settler;
//! * `completions bash|zsh|fish` — shell completions.
//!
//! Exit codes, help texts and JSON errors follow one contract ([`exit`]).

mod approve;
mod data;
mod exit;
mod facilitator;
mod help;
mod pay;
mod signer;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::exit::{Exit, Failure, Format};

/// The command line.
#[derive(Parser)]
#[command(name = "walletgate", version, about = "Client of walletgate services")]
struct Cli {
    /// Output format of results and errors (json: one JSON document on
    /// stdout, errors as {"error": {kind, message, causes, exit}})
    #[arg(long, value_enum, default_value_t = Format::Text, global = true)]
    format: Format,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// One paid request: pays the x402 quote within --max-usd, prints the
    /// body on stdout and one receipt line on stderr
    Pay(pay::PayArgs),
    /// Approve Permit2 for at most --max-usd of a token (once, before paying
    /// metered `upto` offers); --dry-run prints the transaction only
    Approve(approve::ApproveArgs),
    /// Serve the standard facilitator API (POST /verify, /settle, GET
    /// /supported), settling on chain with the settler's own key
    Facilitator(facilitator::FacilitatorArgs),
    /// The data API commands (login, whoami, auth, api, mcp-bridge).
    #[command(flatten)]
    Data(data::DataCommand),
    /// Print a completion script for a shell
    Completions {
        /// The shell
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// The command tree with the exit-code table and examples in every help.
fn command() -> clap::Command {
    help::decorate(Cli::command(), "walletgate")
}

/// Whether the raw arguments ask for JSON (for errors found before parsing
/// finished).
fn wants_json() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2)
        .any(|pair| pair[0] == "--format" && pair[1] == "json")
        || args.iter().any(|arg| arg == "--format=json")
}

fn main() -> ExitCode {
    // A key on the command line is readable by every user of the machine
    // (the process list): refused before anything parses (or echoes) it.
    if std::env::args().any(|arg| arg == "--private-key" || arg.starts_with("--private-key=")) {
        let failure = Failure::usage(format!(
            "--private-key is read from {} only, never from the command line",
            signer::KEY_VARIABLE
        ));
        let format = if wants_json() {
            Format::Json
        } else {
            Format::Text
        };
        return failure.report("", format).into();
    }
    let cli = match command()
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches))
    {
        Ok(cli) => cli,
        Err(error) => {
            if matches!(
                error.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            ) {
                // Help and version are answers, on stdout.
                print!("{error}");
                return Exit::Ok.into();
            }
            let rendered = error.render().to_string();
            if wants_json() {
                let message = rendered
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .trim_start_matches("error: ")
                    .to_owned();
                let mut failure = Failure::usage(message);
                for line in rendered
                    .lines()
                    .skip(1)
                    .filter(|line| !line.trim().is_empty())
                {
                    failure = failure.with_cause(line.trim());
                }
                println!("{}", failure.json());
            }
            eprint!("{rendered}");
            return Exit::Usage.into();
        }
    };
    let format = cli.format;
    if let Command::Completions { shell } = cli.command {
        clap_complete::generate(shell, &mut command(), "walletgate", &mut std::io::stdout());
        return Exit::Ok.into();
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            return Failure::from_error(Exit::Api, &error)
                .report("(runtime)", format)
                .into();
        }
    };
    let exit = runtime.block_on(async move {
        match cli.command {
            Command::Pay(args) => pay::run(args, format).await,
            Command::Approve(args) => approve::run(args, format).await,
            Command::Data(command) => data::run(command, format).await,
            Command::Facilitator(args) => facilitator::run(args, format).await,
            Command::Completions { .. } => Exit::Ok,
        }
    });
    exit.into()
}
