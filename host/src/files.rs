//! Reading the files a config names (the config itself, schemas,
//! components, migrations): regular files only, and no larger than a cap.
//! A path to `/dev/zero` would otherwise be read until memory ran out, and
//! a FIFO would block start-up for ever.

use std::io::{Error, ErrorKind, Read as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// The largest config file, JSON Schema or migration idem reads.
pub const MAX_TEXT_BYTES: u64 = 16 << 20;

/// The file at `path`, if it is a regular file of at most `max` bytes.
/// Opened without blocking (a FIFO answers at once, and is refused).
pub fn read_bounded(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        let kind = if meta.is_dir() { "a directory" } else { "not a regular file (a device, FIFO or socket)" };
        return Err(Error::new(ErrorKind::InvalidInput, format!("it is {kind}")));
    }
    if meta.len() > max {
        return Err(Error::new(ErrorKind::InvalidInput, format!("it is {} bytes, more than {max}", meta.len())));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // It may grow while read: never past the cap.
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(Error::new(ErrorKind::InvalidInput, format!("it grew past {max} bytes while read")));
    }
    Ok(bytes)
}

/// [`read_bounded`] as UTF-8 text of at most [`MAX_TEXT_BYTES`].
pub fn read_text(path: &Path) -> std::io::Result<String> {
    String::from_utf8(read_bounded(path, MAX_TEXT_BYTES)?)
        .map_err(|_| Error::new(ErrorKind::InvalidData, "it is not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_fifos_directories_and_large_files_are_refused_at_once() {
        let dir = std::env::temp_dir().join(format!("idem-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let err = |p: &Path, max| read_bounded(p, max).expect_err("refused").to_string();
        assert!(err(Path::new("/dev/zero"), 1 << 20).contains("not a regular file"));
        assert!(err(&dir, 1 << 20).contains("a directory"));
        let fifo = dir.join("fifo");
        let _ = std::fs::remove_file(&fifo);
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
        assert!(made.success());
        assert!(err(&fifo, 1 << 20).contains("not a regular file"), "a FIFO answers at once");
        let big = dir.join("big");
        std::fs::write(&big, vec![b'x'; 2048]).expect("write");
        assert!(err(&big, 1024).contains("more than 1024"));
        assert_eq!(read_bounded(&big, 2048).expect("at the cap").len(), 2048);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
