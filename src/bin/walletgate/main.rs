//! `walletgate`: the command-line client of walletgate services.
//!
//! * `walletgate pay URL` — one paid request to an x402 gateway;
//! * the data API commands (login, whoami, auth, api, mcp-bridge) join here.

mod exit;
mod pay;
// Data API commands: `mod data;`

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::exit::Exit;

/// The command line.
#[derive(Debug, Parser)]
#[command(name = "walletgate", version, about = "Client of walletgate services")]
struct Cli {
    // Data API globals (`--base-url`, `--api-key`, `--format`):
    // #[command(flatten)]
    // data: data::DataGlobals,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// One paid request: pays the x402 quote within --max-usd, prints the
    /// body on stdout and one receipt line on stderr.
    Pay(pay::PayArgs),
    // Data API commands:
    // #[command(flatten)]
    // Data(data::DataCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("walletgate: cannot start the runtime: {error}");
            return Exit::Api.into();
        }
    };
    let exit = runtime.block_on(async move {
        match cli.command {
            Command::Pay(args) => pay::run(args).await,
            // Command::Data(command) => data::run(cli.data, command).await,
        }
    });
    exit.into()
}
