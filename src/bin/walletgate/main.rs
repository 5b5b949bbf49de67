//! `walletgate`: the command-line client of walletgate services.

mod data;
mod exit;

use clap::{Parser, Subcommand};

/// Sign in to a wallet-authenticated data API and call it.
#[derive(Parser)]
#[command(name = "walletgate", version, about)]
struct Cli {
    #[command(flatten)]
    data: data::DataGlobals,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    #[command(flatten)]
    Data(data::DataCommand),
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let exit = match cli.command {
        Command::Data(command) => data::run(cli.data, command).await,
    };
    exit.into()
}
