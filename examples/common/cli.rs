//! `--help` and `--version` of the reference servers: answered before
//! anything is read or bound, exit 0.
//!
//! The help lists every variable from the server's own configuration table
//! (the `//! | variable | default | meaning |` rows of its config module), so
//! the docs and `--help` cannot drift apart.

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Command {
    Help,
    Version,
    /// Serve, with the arguments as given.
    Run,
}

/// `--help`/`-h` or `--version`/`-V` anywhere on the command line wins.
pub(crate) fn command(args: &[String]) -> Command {
    if args.iter().any(|arg| arg == "--help" || arg == "-h") {
        Command::Help
    } else if args.iter().any(|arg| arg == "--version" || arg == "-V") {
        Command::Version
    } else {
        Command::Run
    }
}

/// `name version`.
pub(crate) fn version(name: &str) -> String {
    format!("{name} {}", env!("CARGO_PKG_VERSION"))
}

/// The help: `intro`, then one entry per row of the variables table in
/// `source` (a module's text).
pub(crate) fn help(intro: &str, source: &str) -> String {
    let mut text = format!(
        "{}\n\nENVIRONMENT (variable, default, meaning):\n",
        intro.trim()
    );
    for row in source
        .lines()
        .filter_map(|line| line.strip_prefix("//! | `"))
    {
        let cells: Vec<&str> = row.split(" | ").map(str::trim).collect();
        let [variable, default, meaning, ..] = cells.as_slice() else {
            continue;
        };
        let plain = |cell: &str| cell.replace('`', "");
        text.push_str(&format!(
            "  {}\n      default: {}\n      {}\n",
            plain(&format!("`{variable}")),
            plain(default),
            plain(meaning.trim_end_matches('|').trim())
        ));
    }
    text
}

/// Every `"PREFIX…"` string literal of `source`: the variables a config
/// module reads, for the tests that check the help lists each one.
#[cfg(test)]
pub(crate) fn variables_read(source: &str, prefix: &str) -> Vec<String> {
    let quoted = format!("\"{prefix}");
    let mut found: Vec<String> = source
        .match_indices(&quoted)
        .filter_map(|(at, _)| {
            let name: String = source[at + 1..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            source[at + 1 + name.len()..]
                .starts_with('"')
                .then_some(name)
        })
        .collect();
    found.sort();
    found.dedup();
    found
}
