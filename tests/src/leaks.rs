//! Finding a planted secret: a fresh API key that nothing could hold by chance, and scans for
//! any piece of it in bytes (a log, a file) and in every value of a SQLite run store. Shared by
//! the leak tests of the `envace` command and of the studio.

use std::collections::HashSet;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::launch::{Guard, need};

/// How many consecutive characters of the key's random part count as a leak. A logger that
/// cuts what it writes into rows (ureq's trace-level dump of the bytes it sends shows 16 a
/// row) leaves at least that many together; 48 random bits make a match by chance negligible.
pub const WINDOW: usize = 12;

/// The planted key and what of it counts as a leak: any [`WINDOW`] consecutive hex digits of
/// its random part, so a copy that is cut, wrapped into rows or partly masked is found too.
#[derive(Debug)]
pub struct Secret {
    /// The whole key.
    pub key: String,
    windows: HashSet<Vec<u8>>,
}

impl Secret {
    /// A key `prefix` + 48 random hex digits, drawn from the standard library's per-process
    /// random hashing keys, the clock and the process.
    pub fn fresh(prefix: &str) -> Secret {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let mut random = String::new();
        for part in 0..3_u64 {
            let mut hasher = RandomState::new().build_hasher();
            hasher.write_u64(part);
            hasher.write_u128(nanos);
            hasher.write_u32(std::process::id());
            random.push_str(&format!("{:016x}", hasher.finish()));
        }
        let windows = random
            .as_bytes()
            .windows(WINDOW)
            .map(<[u8]>::to_vec)
            .collect();
        Secret {
            key: format!("{prefix}{random}"),
            windows,
        }
    }

    /// The first piece of the key `bytes` holds, if any, with the line it is on. One pass:
    /// only runs of at least [`WINDOW`] lowercase hex digits are looked up.
    pub fn found_in(&self, bytes: &[u8]) -> Option<String> {
        let mut run = 0;
        for (end, byte) in bytes.iter().enumerate() {
            if byte.is_ascii_digit() || (b'a'..=b'f').contains(byte) {
                run += 1;
            } else {
                run = 0;
                continue;
            }
            if run >= WINDOW {
                let piece = &bytes[end + 1 - WINDOW..=end];
                if self.windows.contains(piece) {
                    let start = bytes[..end]
                        .iter()
                        .rposition(|&b| b == b'\n')
                        .map_or(0, |at| at + 1);
                    let stop = bytes[end..]
                        .iter()
                        .position(|&b| b == b'\n')
                        .map_or(bytes.len(), |at| end + at);
                    let line: String = text(&bytes[start..stop]).chars().take(300).collect();
                    return Some(format!("{:?} on the line {line:?}", text(piece)));
                }
            }
        }
        None
    }
}

/// Bytes as text, invalid UTF-8 replaced.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every text or blob value of every row of every table (the schema included), scanned for
/// the key; the leaks found, each naming its table, column and row, and the rows read per
/// table.
pub fn scan_store(path: &Path, secret: &Secret) -> (Vec<String>, Vec<(String, usize)>) {
    let db =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let mut tables: Vec<String> = db
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    tables.push("sqlite_master".to_owned());
    let mut leaks = Vec::new();
    let mut counts = Vec::new();
    for table in tables {
        let mut statement = db.prepare(&format!("SELECT * FROM \"{table}\"")).unwrap();
        let columns: Vec<String> = statement.column_names().map(str::to_owned).collect();
        let mut rows = statement.query([]).unwrap();
        let mut n = 0;
        while let Some(row) = rows.next().unwrap() {
            n += 1;
            for (idx, column) in columns.iter().enumerate() {
                let bytes = match row.get_ref(idx).unwrap() {
                    rusqlite::types::ValueRef::Text(bytes)
                    | rusqlite::types::ValueRef::Blob(bytes) => bytes,
                    _ => continue,
                };
                if let Some(found) = secret.found_in(bytes) {
                    leaks.push(format!(
                        "table {table}, column {column}, row {n}: holds {found}"
                    ));
                }
            }
        }
        counts.push((table, n));
    }
    (leaks, counts)
}

/// The status line of `GET path` on `addr`, sent with `Authorization: Bearer KEY` when `key`
/// is given.
pub fn status_of_get(addr: &str, path: &str, key: Option<&str>) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    let auth = key
        .map(|key| format!("Authorization: Bearer {key}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response.lines().next().unwrap_or_default().to_owned()
}

/// Starts a private D-Bus session bus with GNOME Keyring's Secret Service on it, its login
/// keyring created under `home` and unlocked with `password`; returns the bus (the keyring
/// daemon exits with it) and its address, for `DBUS_SESSION_BUS_ADDRESS`.
pub fn start_keyring(home: &Path, password: &str) -> (Guard, String) {
    let dbus = need("dbus-daemon", "dbus-daemon");
    let daemon = need("gnome-keyring-daemon", "gnome-keyring");
    let mut bus = Command::new(dbus)
        .args(["--session", "--nofork", "--nopidfile", "--print-address=1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("cannot start dbus-daemon");
    let mut address = String::new();
    BufReader::new(bus.stdout.take().expect("dbus-daemon's stdout is piped"))
        .read_line(&mut address)
        .expect("cannot read the bus address from dbus-daemon");
    let bus = Guard(bus);
    let address = address.trim().to_owned();
    assert!(
        address.starts_with("unix:"),
        "dbus-daemon printed {address:?}"
    );
    let mut keyring = Command::new(daemon)
        .args(["--unlock", "--components=secrets"])
        .env("DBUS_SESSION_BUS_ADDRESS", &address)
        .env("HOME", home)
        .env("XDG_DATA_HOME", home.join("data"))
        .env("XDG_RUNTIME_DIR", home)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("cannot start gnome-keyring-daemon");
    keyring
        .stdin
        .take()
        .expect("the daemon's stdin is piped")
        .write_all(password.as_bytes())
        .expect("cannot give the keyring its password");
    // The launcher forks the daemon, which stays on the bus, and exits once it is set up.
    let status = keyring.wait().expect("gnome-keyring-daemon did not exit");
    assert!(
        status.success(),
        "gnome-keyring-daemon --unlock failed ({status})"
    );
    (bus, address)
}
