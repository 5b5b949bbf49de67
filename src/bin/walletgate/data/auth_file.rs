//! `$HOME/.walletgate/auth.json` (or `$WALLETGATE_HOME/auth.json`): the
//! sign-in kept between runs. Mode 0600 in a 0700 directory, written through
//! a temporary file and a rename, refused when anyone else may read it.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use walletgate::client::wallet::Credentials;

/// What the file holds: the server and wallet of the last sign-in, and its
/// credentials until they are revoked.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AuthFile {
    pub(crate) base_url: String,
    pub(crate) address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) credentials: Option<Credentials>,
}

/// The directory: `$WALLETGATE_HOME`, else `$HOME/.walletgate`.
pub(crate) fn directory() -> Result<PathBuf, String> {
    let var = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    if let Some(home) = var("WALLETGATE_HOME") {
        return Ok(PathBuf::from(home));
    }
    var("HOME")
        .map(|home| PathBuf::from(home).join(".walletgate"))
        .ok_or_else(|| "set HOME or WALLETGATE_HOME".to_owned())
}

/// The file's path.
pub(crate) fn path() -> Result<PathBuf, String> {
    Ok(directory()?.join("auth.json"))
}

/// Refuses a file or directory that others may read or write.
fn private(path: &Path, allowed: u32) -> Result<(), String> {
    let mode = fs::metadata(path)
        .map_err(|error| format!("{}: {error}", path.display()))?
        .permissions()
        .mode()
        & 0o777;
    if mode & !allowed != 0 {
        return Err(format!(
            "{} has mode {mode:04o}, wider than {allowed:04o}: others may read the sign-in; \
             run `chmod {allowed:o} {}` (or `walletgate auth clear` and sign in again)",
            path.display(),
            path.display()
        ));
    }
    Ok(())
}

/// The saved sign-in, if any.
pub(crate) fn load() -> Result<Option<AuthFile>, String> {
    let path = path()?;
    if !path.exists() {
        return Ok(None);
    }
    if let Some(directory) = path.parent() {
        private(directory, 0o700)?;
    }
    private(&path, 0o600)?;
    let text = fs::read(&path).map_err(|error| format!("{}: {error}", path.display()))?;
    serde_json::from_slice(&text)
        .map(Some)
        .map_err(|_| format!("{} is not a walletgate sign-in", path.display()))
}

/// Writes `file` atomically with mode 0600 (creating the 0700 directory).
pub(crate) fn save(file: &AuthFile) -> Result<PathBuf, String> {
    let path = path()?;
    let directory = path.parent().ok_or("the auth file has no directory")?;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(directory)
        .map_err(|error| format!("{}: {error}", directory.display()))?;
    private(directory, 0o700)?;
    let json = serde_json::to_vec_pretty(file).map_err(|error| error.to_string())?;
    let temporary = directory.join(format!(".auth.json.{}.tmp", std::process::id()));
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)
        .and_then(|mut out| {
            out.write_all(&json)?;
            out.sync_all()
        })
        .and_then(|()| fs::rename(&temporary, &path));
    if let Err(error) = written {
        let _ = fs::remove_file(&temporary);
        return Err(format!("{}: {error}", path.display()));
    }
    Ok(path)
}

/// Deletes the file; whether there was one.
pub(crate) fn remove() -> Result<bool, String> {
    let path = path()?;
    match fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(format!("{}: {error}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_or_directory_others_may_read_is_refused() {
        let directory =
            std::env::temp_dir().join(format!("walletgate-auth-file-{}", std::process::id()));
        let _ = fs::remove_dir_all(&directory);
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&directory)
            .unwrap();
        let file = directory.join("auth.json");
        fs::write(&file, "{}").unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap();
        assert!(private(&file, 0o600).is_ok());
        fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
        let refused = private(&file, 0o600).unwrap_err();
        assert!(
            refused.contains("0644") && refused.contains("chmod 600"),
            "{refused}"
        );
        assert!(private(&directory, 0o700).is_ok());
        fs::set_permissions(&directory, fs::Permissions::from_mode(0o755)).unwrap();
        assert!(private(&directory, 0o700).is_err());
        let _ = fs::remove_dir_all(&directory);
    }
}
