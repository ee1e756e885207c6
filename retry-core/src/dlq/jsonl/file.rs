//! The file itself: opening it without following links, checking who owns it and who may read
//! it, the advisory lock a group commit holds, a value as one of its JSON lines, and the `.torn`
//! file beside it.

use std::ffi::OsString;
use std::fs::{File, Metadata, OpenOptions, TryLockError};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use super::damaged::TornLine;
use crate::dlq::DlqError;
use crate::time::to_millis;

/// Which file a descriptor or a path refers to: a file moved away (archived after an import) or
/// removed while a sink has it open must not keep getting letters nobody will look for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    pub(super) fn of(metadata: &Metadata) -> Self {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt as _;
            FileId {
                dev: metadata.dev(),
                ino: metadata.ino(),
            }
        }
        #[cfg(not(unix))]
        {
            // No inode numbers: a file moved away goes unnoticed (documented on `JsonlSink`).
            let _ = metadata;
            FileId { dev: 0, ino: 0 }
        }
    }
}

/// The file now at `path` (not following a link) and its length; `None` if there is none.
pub(super) fn at_path(path: &Path) -> io::Result<Option<(FileId, u64)>> {
    match std::fs::symlink_metadata(path) {
        Ok(metadata) => Ok(Some((FileId::of(&metadata), metadata.len()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// How a sink opens its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    /// Reads and appends; creates the file, checks its owner and narrows its permissions.
    Write,
    /// Reads only, creates and changes nothing.
    Read,
}

/// Opens the dead-letter file at `path` for `access`, refusing a symbolic link. Returns the
/// file, its identity, and whether it was created just now.
///
/// For [`Access::Write`], a file owned by another user is refused, and one that others may read
/// or write is narrowed to 0600 with a warning (see `JsonlSink::open` for why).
pub(super) fn open(path: &Path, access: Access) -> Result<(File, FileId, bool), DlqError> {
    let (file, created) = match access {
        Access::Write => open_owner_only(path, true),
        Access::Read => {
            let mut options = OpenOptions::new();
            options.read(true);
            no_follow(&mut options);
            options.open(path).map(|file| (file, false))
        }
    }
    .map_err(|e| open_error(path, &e))?;
    let metadata = file
        .metadata()
        .map_err(|e| io_error("cannot inspect", path, &e))?;
    if !metadata.is_file() {
        return Err(io_error(
            "cannot use",
            path,
            &io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"),
        ));
    }
    if access == Access::Write {
        check_owner(path, &metadata)?;
        narrow_permissions(path, &file, &metadata)?;
        if created {
            sync_parent(path);
        }
    }
    Ok((file, FileId::of(&metadata), created))
}

/// Opens `path` to read and append, creating it owner-only (`create`); never through a link.
pub(super) fn open_owner_only(path: &Path, create: bool) -> io::Result<(File, bool)> {
    let mut options = OpenOptions::new();
    options.read(true).append(true);
    no_follow(&mut options);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    if !create {
        return options.open(path).map(|file| (file, false));
    }
    // `create_new` is `O_CREAT | O_EXCL`, which never follows a link either.
    match options.clone().create_new(true).open(path) {
        Ok(file) => Ok((file, true)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok((options.open(path)?, false)),
        Err(e) => Err(e),
    }
}

/// `O_NOFOLLOW`: a symbolic link at the path fails the open (`ELOOP`) instead of being followed
/// to wherever it points.
fn no_follow(options: &mut OpenOptions) {
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(options, libc::O_NOFOLLOW);
    #[cfg(not(unix))]
    let _ = options;
}

/// An open that failed, with the link case said plainly (`ELOOP` reads "Too many levels of
/// symbolic links").
fn open_error(path: &Path, error: &io::Error) -> DlqError {
    #[cfg(unix)]
    if error.raw_os_error() == Some(libc::ELOOP)
        && std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
    {
        return io_error(
            "cannot open",
            path,
            &io::Error::new(
                error.kind(),
                "it is a symbolic link, and dead letters are only written to the file itself \
                 (O_NOFOLLOW); point the sink at the real path",
            ),
        );
    }
    io_error("cannot open", path, error)
}

/// Refuses a file that another user owns: letters written into it would be theirs to read and
/// to change.
fn check_owner(path: &Path, metadata: &Metadata) -> Result<(), DlqError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        // The one `unsafe` of the crate: an FFI call std has no safe wrapper for (std can read
        // a file's owner but not who this process is). SAFETY: geteuid has no preconditions and
        // cannot fail.
        let me = unsafe { libc::geteuid() };
        if metadata.uid() != me {
            return Err(io_error(
                "cannot use",
                path,
                &io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "it is owned by uid {}, not by this user (uid {me}); dead letters are \
                         only written to a file of the user that writes them",
                        metadata.uid()
                    ),
                ),
            ));
        }
    }
    #[cfg(not(unix))]
    let _ = (path, metadata);
    Ok(())
}

/// Narrows a file that others than its owner may read or write to 0600 (`fchmod`), with a
/// warning naming the mode it had.
fn narrow_permissions(path: &Path, file: &File, metadata: &Metadata) -> Result<(), DlqError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = metadata.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            file.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(|e| io_error("cannot narrow the permissions of", path, &e))?;
            tracing::warn!(target: "retry_core::dlq",
                path = %path.display(),
                mode = %format_args!("{mode:03o}"),
                "the dead-letter file was accessible to others than its owner; narrowed it to 600"
            );
        }
    }
    #[cfg(not(unix))]
    let _ = (path, file, metadata);
    Ok(())
}

/// An advisory lock on the file (`flock`), released when dropped. Held on a duplicate of the
/// descriptor, so the sink can keep using its own while the lock is held.
pub(super) struct Locked(Option<File>);

/// How long a sink waits for the file's lock. A group commit holds it for one append and one
/// fsync; a holder that keeps it longer is stuck: better an error naming the lock than a park
/// that never returns.
pub(super) const LOCK_WAIT: Duration = Duration::from_secs(5);

/// Takes the lock, waiting up to [`LOCK_WAIT`] for its holder: exclusive for a group commit,
/// shared for a reader. (Polled: `flock` itself cannot time out.)
pub(super) fn lock(file: &File, path: &Path, exclusive: bool) -> Result<Locked, DlqError> {
    let copy = file
        .try_clone()
        .map_err(|e| io_error("cannot lock", path, &e))?;
    let started = Instant::now();
    let mut pause = Duration::from_micros(250);
    loop {
        let tried = if exclusive {
            copy.try_lock()
        } else {
            copy.try_lock_shared()
        };
        match tried {
            Ok(()) => return Ok(Locked(Some(copy))),
            Err(TryLockError::WouldBlock) if started.elapsed() < LOCK_WAIT => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(10));
            }
            Err(TryLockError::WouldBlock) => {
                return Err(io_error(
                    "cannot lock",
                    path,
                    &io::Error::new(
                        io::ErrorKind::WouldBlock,
                        format!(
                            "another process has held the file's lock for over {} s",
                            LOCK_WAIT.as_secs()
                        ),
                    ),
                ));
            }
            // File systems without locks: one process per file is then up to the user
            // (documented on `JsonlSink`).
            Err(TryLockError::Error(e)) if e.kind() == io::ErrorKind::Unsupported => {
                return Ok(Locked(None));
            }
            Err(TryLockError::Error(e)) => return Err(io_error("cannot lock", path, &e)),
        }
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        if let Some(file) = &self.0 {
            // Closing the duplicate would not release it: the original descriptor shares it.
            let _ = file.unlock();
        }
    }
}

/// The longest line the sink writes or the reader reads, newline excluded: 4 MiB. See
/// [`JsonlSink::MAX_LINE`](super::JsonlSink::MAX_LINE).
pub(super) const MAX_LINE: usize = 4 << 20;

/// `value` as one JSON line, newline included. `serde_json`'s compact form escapes newlines in
/// strings, so the line holds exactly one `\n`, at its end.
pub(super) fn to_line(value: &impl Serialize) -> Result<Vec<u8>, DlqError> {
    let mut line = serde_json::to_vec(value).map_err(|e| DlqError::Serialize(e.to_string()))?;
    line.push(b'\n');
    Ok(line)
}

/// An I/O error saying what was being done to which file; the kind is kept, and
/// `DlqError::Io`'s source downcasts to `io::Error`.
pub(super) fn io_error(doing: &str, path: &Path, error: &io::Error) -> DlqError {
    DlqError::Io(Box::new(io::Error::new(
        error.kind(),
        format!("{doing} dead-letter file {}: {error}", path.display()),
    )))
}

/// The same error again, for the next caller of a group that failed as a whole.
pub(super) fn same_error(error: &DlqError) -> DlqError {
    match error {
        DlqError::Io(source) => {
            let kind = source
                .downcast_ref::<io::Error>()
                .map_or(io::ErrorKind::Other, io::Error::kind);
            DlqError::Io(Box::new(io::Error::new(
                kind,
                crate::error_chain(&**source).to_string(),
            )))
        }
        DlqError::Corrupt(what) => DlqError::Corrupt(what.clone()),
        DlqError::Serialize(what) => DlqError::Serialize(what.clone()),
    }
}

/// Makes a new or renamed file's directory entry durable, so the file itself survives a power
/// loss.
pub(super) fn sync_parent(path: &Path) {
    if let Err(e) = File::open(parent(path)).and_then(|dir| dir.sync_all()) {
        tracing::warn!(target: "retry_core::dlq", path = %path.display(), error = %crate::error_chain(&e), "could not sync the dead-letter file's directory");
    }
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// `<path><suffix>`: the files that live beside the dead-letter file.
pub(super) fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(suffix);
    PathBuf::from(name)
}

/// The file beside the dead-letter file that torn lines are kept in.
pub(super) const TORN: &str = ".torn";

/// Appends a torn line cut off the dead-letter file to `<path>.torn` (owner-only), as
/// `{"offset":N,"found_at":"...","text":"..."}`, and fsyncs it, before the main file is
/// changed: a crash in between leaves the line in both.
pub(super) fn keep_torn(path: &Path, torn: &TornLine) -> Result<(), DlqError> {
    #[derive(Serialize)]
    struct Kept<'a> {
        offset: u64,
        #[serde(with = "crate::time::rfc3339")]
        found_at: SystemTime,
        text: &'a str,
    }
    let kept_path = beside(path, TORN);
    let line = to_line(&Kept {
        offset: torn.offset,
        found_at: to_millis(SystemTime::now()),
        text: &torn.text,
    })?;
    let (mut file, created) =
        open_owner_only(&kept_path, true).map_err(|e| open_error(&kept_path, &e))?;
    file.write_all(&line)
        .and_then(|()| file.sync_data())
        .map_err(|e| io_error("cannot append to", &kept_path, &e))?;
    if created {
        sync_parent(&kept_path);
    }
    Ok(())
}
