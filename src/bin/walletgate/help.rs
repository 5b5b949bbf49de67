//! What every `--help` ends with: the command's examples, the environment
//! it reads that no flag shows, and the exit-code table. Added to the whole
//! tree in one pass so no command can miss the table.

use crate::exit::TABLE;

/// Examples (and environment that has no flag) of the command at `path`.
fn examples(path: &str) -> Option<&'static str> {
    Some(match path {
        "walletgate" => {
            "Examples:
  walletgate pay http://127.0.0.1:8402/v1/chat/completions --data-file body.json
  walletgate login --scopes read:favorites
  walletgate api request GET /api/v2/collections --params '{\"limit\": 2}'
  walletgate completions bash > ~/.local/share/bash-completion/completions/walletgate"
        }
        "walletgate pay" => {
            "Examples:
  WALLETGATE_PRIVATE_KEY=0x… walletgate pay http://127.0.0.1:8402/v1/chat/completions \\
    -d '{\"model\": \"openai/gpt-4o\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}'
  walletgate pay URL --data-file body.json --max-usd 0.05 --keystore ~/.foundry/keystores/dev
  walletgate pay URL -d '{…}' --dry-run          # the offer and the verdict, nothing signed
  walletgate pay URL -d '{…}' --idempotency-key order-2026-000001   # run again: the same answer, paid once
  walletgate pay URL -d '{…}' --protocol mpp     # pay MPP's challenge where x402 is offered too
  walletgate pay -X GET URL -H 'X-Request-Id: 42'"
        }
        "walletgate login" | "walletgate auth login" => {
            "Examples:
  WALLETGATE_API_KEY=… WALLETGATE_PRIVATE_KEY=0x… walletgate login --scopes read:favorites,read:wallets
  walletgate login --scopes read:favorites --keystore wallet.json --base-url https://api.example

Environment:
  WALLETGATE_HOME         where the sign-in is kept [default: $HOME/.walletgate]"
        }
        "walletgate whoami" | "walletgate auth status" => {
            "Examples:
  walletgate whoami
  walletgate auth status --format json

Environment:
  WALLETGATE_HOME  where the sign-in is kept [default: $HOME/.walletgate]"
        }
        "walletgate auth" => {
            "Examples:
  walletgate auth login --scopes read:favorites
  walletgate auth status
  walletgate auth refresh
  walletgate auth revoke"
        }
        "walletgate auth scopes" | "walletgate auth clear" => {
            "Examples:
  walletgate auth scopes --format json
  walletgate auth clear

Environment:
  WALLETGATE_HOME  where the sign-in is kept [default: $HOME/.walletgate]"
        }
        "walletgate auth refresh" | "walletgate auth revoke" => {
            "Examples:
  walletgate auth refresh
  walletgate auth revoke --base-url https://api.example

Environment:
  WALLETGATE_HOME  where the sign-in is kept [default: $HOME/.walletgate]"
        }
        "walletgate api" | "walletgate api request" => {
            "Examples:
  walletgate api request GET /api/v2/account/0xf39F…2266/favorites --params '{\"limit\": 2}'
  walletgate api request -X PUT /api/v2/accounts/agent -d '{\"name\": \"bot\"}'
  walletgate api request /api/v2/collections -H 'Accept: application/json' --format json

Environment:
  WALLETGATE_HOME  where the sign-in is kept [default: $HOME/.walletgate]"
        }
        "walletgate mcp-bridge" => {
            "Examples:
  walletgate mcp-bridge                       # stdio MCP server for {base-url}/mcp
  walletgate mcp-bridge --url https://api.example/mcp

Environment:
  WALLETGATE_HOME  where the sign-in is kept [default: $HOME/.walletgate]"
        }
        "walletgate facilitator" => {
            "Examples:
  walletgate facilitator --rpc-url http://127.0.0.1:8545 --key-file settler.key \\
    --network eip155:84532 --asset 0x036CbD53842c5426634e7929541eC2318f3dCF7e \\
    --pay-to 0x70997970C51812dc3A010C7d01b50e0d17dc79C8
  walletgate facilitator … --listen 0.0.0.0:4020 --auth-token-file facilitator.token

The key file holds 64 hex digits (0x optional) and must be mode 0600; fund the
settler's address with ETH for gas. Callers send `Authorization: Bearer <token>`.

Environment:
  WALLETGATE_FACILITATOR_RPC_URL  the --rpc-url (keeps a provider's API key off the process list)"
        }
        "walletgate approve" => {
            "Examples:
  walletgate approve --rpc-url https://sepolia.base.org \\
    --asset 0x036CbD53842c5426634e7929541eC2318f3dCF7e --max-usd 5 --dry-run
  walletgate approve --rpc-url https://sepolia.base.org \\
    --asset 0x036CbD53842c5426634e7929541eC2318f3dCF7e --max-usd 5 --key-file wallet.key

Once per token, before paying metered (`upto`) offers: Permit2 may then pull at
most that many USD in all, each permit at most its own ceiling. The wallet pays
the gas. Never unlimited unless --unlimited.

Environment:
  WALLETGATE_RPC_URL      the --rpc-url (keeps a provider's API key off the process list)
  WALLETGATE_PRIVATE_KEY  the wallet key, when no --key-file or --keystore"
        }
        "walletgate completions" => {
            "Examples:
  walletgate completions bash > ~/.local/share/bash-completion/completions/walletgate
  walletgate completions zsh > \"${fpath[1]}/_walletgate\"
  walletgate completions fish > ~/.config/fish/completions/walletgate.fish"
        }
        _ => return None,
    })
}

/// `command` and its subcommands with the table after every help, and the
/// examples before it in the long help (`--help`).
pub(crate) fn decorate(command: clap::Command, path: &str) -> clap::Command {
    let long = match examples(path) {
        Some(examples) => format!("{examples}\n\n{TABLE}"),
        None => TABLE.to_owned(),
    };
    let names: Vec<String> = command
        .get_subcommands()
        .map(|sub| sub.get_name().to_owned())
        .collect();
    let mut command = command.after_help(TABLE).after_long_help(long);
    for name in names {
        let sub_path = format!("{path} {name}");
        command = command.mut_subcommand(name, |sub| decorate(sub, &sub_path));
    }
    command
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// Every command, with its path.
    fn walk(command: &clap::Command, path: String, out: &mut Vec<(String, clap::Command)>) {
        out.push((path.clone(), command.clone()));
        for sub in command.get_subcommands() {
            walk(sub, format!("{path} {}", sub.get_name()), out);
        }
    }

    #[test]
    fn every_command_has_examples_and_the_table() {
        let mut all = Vec::new();
        walk(
            &decorate(crate::Cli::command(), "walletgate"),
            "walletgate".into(),
            &mut all,
        );
        for (path, mut command) in all {
            if path.ends_with(" help") {
                continue;
            }
            let help = command.render_long_help().to_string();
            assert!(
                help.trim_end().ends_with(TABLE.lines().last().unwrap()),
                "{path}"
            );
            assert!(help.contains("Examples:"), "{path} has no examples");
        }
    }
}
