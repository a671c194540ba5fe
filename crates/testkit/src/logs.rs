//! Reading the logs of the processes a test starts (to wait for a line, or to show what
//! went wrong in a failure message), and the switch that keeps their directories.

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The environment variables that keep the temporary directories of servers and
/// smartfeeds (and print where they are), for a look after the test.
pub const KEEP_ENV: [&str; 2] = ["SMARTFEEDS_KEEP_PROSODY", "SMARTFEEDS_KEEP_EJABBERD"];

/// Whether the temporary directories are to be kept (either of [`KEEP_ENV`] set).
pub fn keep_dirs() -> bool {
    KEEP_ENV.iter().any(|var| std::env::var_os(var).is_some())
}

/// A temporary directory of a test's process, removed on drop, unless [`keep_dirs`]: then
/// kept, and where it is printed on stderr.
pub struct WorkDir(Option<tempfile::TempDir>);

impl WorkDir {
    /// A fresh directory whose name starts with `prefix`.
    pub fn new(prefix: &str) -> Result<WorkDir, String> {
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
        Ok(WorkDir(Some(dir)))
    }

    pub fn path(&self) -> &Path {
        self.0.as_ref().expect("present until dropped").path()
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if keep_dirs()
            && let Some(dir) = self.0.take()
        {
            eprintln!("keeping the directory {}", dir.keep().display());
        }
    }
}

/// The current length of a file (0 if it does not exist): where to read new lines from.
pub fn offset(path: &Path) -> u64 {
    fs::metadata(path).map_or(0, |m| m.len())
}

/// What `path` holds past `offset` (empty if it cannot be read).
pub fn read_from(path: &Path, offset: u64) -> String {
    let mut text = String::new();
    if let Ok(mut file) = fs::File::open(path)
        && file.seek(SeekFrom::Start(offset)).is_ok()
    {
        let mut bytes = Vec::new();
        let _ = file.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    text
}

/// The last `lines` lines of each of `files` (name shown, path), or "(WHO wrote nothing)".
pub fn tail(who: &str, files: &[(&str, PathBuf)], lines: usize) -> String {
    let mut out = String::new();
    for (name, path) in files {
        let text = fs::read_to_string(path).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        let tail = &all[all.len().saturating_sub(lines)..];
        if !tail.is_empty() {
            out.push_str(&format!("--- {name} (last {} lines) ---\n{}\n", tail.len(), tail.join("\n")));
        }
    }
    if out.is_empty() {
        out.push_str(&format!("({who} wrote nothing)\n"));
    }
    out
}
