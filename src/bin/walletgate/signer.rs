//! The wallet key of `pay` and `login`: a keystore file (scrypt + AES, as
//! geth and foundry write them), a file holding the hex key, or
//! `WALLETGATE_PRIVATE_KEY`; never a command-line argument, which other
//! users may read in the process list. No error repeats a key or password.

use std::io::IsTerminal;
use std::path::PathBuf;

use alloy_signer_local::PrivateKeySigner;
use clap::Args;

use crate::exit::Failure;

/// The environment variable holding the hex key when no file is named.
pub(crate) const KEY_VARIABLE: &str = "WALLETGATE_PRIVATE_KEY";

/// Where the wallet key comes from.
#[derive(Args)]
pub(crate) struct KeyArgs {
    /// The wallet key (hex), from the environment only (`--private-key` on
    /// the command line is refused: other users can read it there); a key
    /// file or keystore comes first
    #[arg(
        long = "private-key",
        value_name = "HEX",
        env = KEY_VARIABLE,
        hide_env_values = true
    )]
    private_key: Option<String>,
    /// A file holding the private key (hex), instead of WALLETGATE_PRIVATE_KEY
    #[arg(long, value_name = "FILE", conflicts_with = "keystore")]
    // (The environment's key is not a conflict: an explicit file wins.)
    key_file: Option<PathBuf>,
    /// An encrypted JSON keystore (geth, foundry `cast wallet`), instead of
    /// WALLETGATE_PRIVATE_KEY
    #[arg(long, value_name = "FILE", env = "WALLETGATE_KEYSTORE")]
    keystore: Option<PathBuf>,
    /// A file holding the keystore's password; without it the password is
    /// asked on the terminal (a keystore with no terminal needs the file)
    #[arg(long, value_name = "FILE", env = "WALLETGATE_KEYSTORE_PASSWORD_FILE")]
    keystore_password_file: Option<PathBuf>,
}

impl KeyArgs {
    /// The signer, from the keystore, the key file or the environment.
    pub(crate) fn signer(&self) -> Result<PrivateKeySigner, Failure> {
        if let Some(keystore) = &self.keystore {
            let password = self.password()?;
            return PrivateKeySigner::decrypt_keystore(
                keystore,
                password.trim_end_matches(['\r', '\n']),
            )
            .map_err(|error| {
                // The keystore's errors name the file and the cause
                // (e.g. a MAC mismatch: a wrong password), never secrets.
                Failure::auth(format!("cannot open the keystore {}", keystore.display()))
                    .with_cause(error.to_string())
            });
        }
        let (text, source) = match &self.key_file {
            Some(path) => (
                std::fs::read_to_string(path).map_err(|error| {
                    Failure::usage(format!("cannot read --key-file {}", path.display()))
                        .with_cause(error.to_string())
                })?,
                "--key-file",
            ),
            None => (
                self.private_key.clone().ok_or_else(|| {
                    Failure::auth(format!(
                        "no wallet key: set {KEY_VARIABLE}, or pass --key-file or --keystore"
                    ))
                })?,
                KEY_VARIABLE,
            ),
        };
        let hex = text.trim();
        let hex = hex.strip_prefix("0x").unwrap_or(hex);
        hex.parse::<PrivateKeySigner>().map_err(|_| {
            Failure::auth(format!(
                "{source} does not hold a 32-byte hex secp256k1 key"
            ))
        })
    }

    fn password(&self) -> Result<String, Failure> {
        if let Some(path) = &self.keystore_password_file {
            return std::fs::read_to_string(path).map_err(|error| {
                Failure::usage(format!(
                    "cannot read --keystore-password-file {}",
                    path.display()
                ))
                .with_cause(error.to_string())
            });
        }
        if !std::io::stdin().is_terminal() {
            return Err(Failure::usage(
                "the keystore's password: pass --keystore-password-file (or set \
                 WALLETGATE_KEYSTORE_PASSWORD_FILE); stdin is not a terminal to ask on",
            ));
        }
        rpassword::prompt_password("Keystore password: ").map_err(|error| {
            Failure::usage("cannot read the password from the terminal")
                .with_cause(error.to_string())
        })
    }
}
