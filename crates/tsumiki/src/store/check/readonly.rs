//! The read-only storage backend of [`check`](super::check) and `inspect`.

use std::io;
use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::storage::{Storage, StorageFile};

/// A database directory read without writing: files are opened read-only, and every
/// write, sync, rename or removal fails. Used by [`check`](super::check) and by `inspect`.
pub(crate) struct ReadOnlyDir {
    dir: PathBuf,
}

impl ReadOnlyDir {
    /// The directory `dir`, which must exist ([`Error::NotFound`] otherwise).
    pub(crate) fn new(dir: &Path) -> Result<ReadOnlyDir, Error> {
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => Ok(ReadOnlyDir { dir: dir.to_path_buf() }),
            Ok(_) => Err(Error::NotFound(format!("{} is not a directory", dir.display()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Err(Error::NotFound(format!("{} does not exist", dir.display())))
            }
            Err(e) => Err(Error::io(dir.display().to_string(), e)),
        }
    }
}

fn refused() -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, "the database is opened read-only for checking")
}

struct ReadOnlyFile(std::fs::File);

impl StorageFile for ReadOnlyFile {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(&self.0, buf, off)
    }
    fn write_at(&self, _buf: &[u8], _off: u64) -> io::Result<()> {
        Err(refused())
    }
    fn sync_data(&self) -> io::Result<()> {
        Err(refused())
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
}

impl Storage for ReadOnlyDir {
    fn list(&self) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.dir)? {
            if let Ok(name) = e?.file_name().into_string() {
                out.push(name);
            }
        }
        Ok(out)
    }

    fn open(&self, name: &str, create: bool) -> io::Result<Box<dyn StorageFile>> {
        use std::os::unix::fs::OpenOptionsExt;
        if create {
            return Err(refused());
        }
        // Never through a link, as the database itself.
        let f =
            std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(self.dir.join(name)).map_err(
                |e| {
                    if e.raw_os_error() == Some(libc::ELOOP) {
                        io::Error::new(e.kind(), format!("{name} is a symbolic link, which the database never follows"))
                    } else {
                        e
                    }
                },
            )?;
        if !f.metadata()?.is_file() {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{name} is not a regular file")));
        }
        Ok(Box::new(ReadOnlyFile(f)))
    }

    fn remove(&self, _name: &str) -> io::Result<()> {
        Err(refused())
    }

    fn rename(&self, _from: &str, _to: &str) -> io::Result<()> {
        Err(refused())
    }

    fn sync_dir(&self) -> io::Result<()> {
        Err(refused())
    }

    fn lock(&self) -> io::Result<Box<dyn Send + Sync>> {
        // The same lock the database takes: an open database holds it.
        Ok(Box::new(crate::storage::lock_directory(&self.dir)?))
    }
}
