//! BFCL's `GorillaFileSystem`: an in-memory tree of folders and files that shell-like calls
//! (`cd`, `ls`, `mv`, `grep`, `du`, ...) walk and change, rebuilt with the Python objects'
//! sharing.
//!
//! The Python class links `Directory` and `File` objects, and some of its operations share
//! them rather than copy them: `mv` of a folder gives the new folder the old one's very
//! `contents` dict (the children keep pointing at the old, now detached, folder as their
//! parent), `cp` of a folder gives the copy a shallow copy of that dict (the same child objects
//! under two names). Later calls see that sharing (`cd ..` from a moved folder's child lands in
//! the detached folder; `echo` into a copied file changes both names). So the tree is kept here
//! as three arenas, folders, files and contents dicts, addressed by index, and every operation
//! follows the Python code step by step on them.

use serde_json::{Map, Value};

use super::pyops::{self, error, no_attribute, object, str_of, truthy, type_name};
use super::{Args, Backend, Method, Outcome, Raised, opt, req};
use crate::error::{Error, Result};

const CLASS: &str = "GorillaFileSystem";

/// Its public methods, in the order the Python class defines them.
pub const METHODS: &[Method] = &[
    Method {
        name: "pwd",
        params: &[],
    },
    Method {
        name: "ls",
        params: &[opt("a")],
    },
    Method {
        name: "cd",
        params: &[req("folder")],
    },
    Method {
        name: "mkdir",
        params: &[req("dir_name")],
    },
    Method {
        name: "touch",
        params: &[req("file_name")],
    },
    Method {
        name: "echo",
        params: &[req("content"), opt("file_name")],
    },
    Method {
        name: "cat",
        params: &[req("file_name")],
    },
    Method {
        name: "find",
        params: &[opt("path"), opt("name")],
    },
    Method {
        name: "wc",
        params: &[req("file_name"), opt("mode")],
    },
    Method {
        name: "sort",
        params: &[req("file_name")],
    },
    Method {
        name: "grep",
        params: &[req("file_name"), req("pattern")],
    },
    Method {
        name: "du",
        params: &[opt("human_readable")],
    },
    Method {
        name: "tail",
        params: &[req("file_name"), opt("lines")],
    },
    Method {
        name: "diff",
        params: &[req("file_name1"), req("file_name2")],
    },
    Method {
        name: "mv",
        params: &[req("source"), req("destination")],
    },
    Method {
        name: "rm",
        params: &[req("file_name")],
    },
    Method {
        name: "rmdir",
        params: &[req("dir_name")],
    },
    Method {
        name: "cp",
        params: &[req("source"), req("destination")],
    },
];

/// The characters a new file or folder name may not hold.
const INVALID_NAME_CHARS: &str = "|/\\?%*:\"><";

/// How deep `find` may recurse before Python's recursion limit (1000 frames, a few taken by the
/// harness) stops it; only a folder that contains itself gets there.
const FIND_DEPTH: usize = 970;
/// The same for `du`, whose recursion takes two frames a level (the function and its
/// generator expression).
const DU_DEPTH: usize = 485;
/// The same for writing the state out.
const STATE_DEPTH: usize = 970;
/// How many entries one walk of the tree may visit. Shared folders can make the walk grow
/// exponentially (Python would run for ever); past this the walk stops with an error.
const VISIT_BUDGET: usize = 2_000_000;

const FIND_RECURSION: &str = "maximum recursion depth exceeded while calling a Python object";
const DU_RECURSION: &str = "maximum recursion depth exceeded";
const TOO_LARGE: &str = "the file tree is too large to walk (shared folders repeat it too often)";

/// An entry of a folder: a file or a folder, by arena index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Node {
    File(usize),
    Dir(usize),
}

/// Python's `File`: its name and content (a string, unless `echo` wrote something else).
#[derive(Clone, Debug)]
struct FileObj {
    name: String,
    content: Value,
}

/// Python's `Directory`: its name, its parent folder, and which contents dict it holds.
#[derive(Clone, Debug)]
struct DirObj {
    name: String,
    parent: Option<usize>,
    contents: usize,
}

/// A `contents` dict: names to entries, in insertion order.
type Dict = Vec<(String, Node)>;

/// Which of `mv` and `cp` [`GorillaFileSystem::transfer`] runs.
#[derive(Clone, Copy, Debug)]
enum Transfer {
    Move,
    Copy,
}

/// BFCL's file system, its folders and files kept in arenas (see the module docs).
#[derive(Clone, Debug)]
pub struct GorillaFileSystem {
    files: Vec<FileObj>,
    dirs: Vec<DirObj>,
    dicts: Vec<Dict>,
    /// The public `root`.
    root: usize,
    /// The private `_current_dir`.
    current: usize,
}

fn bad_config(message: impl Into<String>) -> Error {
    pyops::config_error(CLASS, message)
}

/// Python's `needle in container` for a one-string needle: a substring, a list element, a
/// dict key; other types raise.
fn py_in(needle: &str, container: &Value) -> std::result::Result<bool, Raised> {
    match container {
        Value::String(s) => Ok(s.contains(needle)),
        Value::Array(items) => Ok(items.iter().any(|v| v.as_str() == Some(needle))),
        Value::Object(map) => Ok(map.contains_key(needle)),
        other => Err(format!(
            "argument of type '{}' is not iterable",
            type_name(other)
        )),
    }
}

/// The answer of `wc`, `sort`, `grep` and `tail` for a name that is no file in the current
/// folder.
fn no_such_file(command: &str, file_name: &Value) -> Outcome {
    error(format!(
        "{command}: {}: No such file or directory",
        str_of(file_name)
    ))
}

/// `_validate_file_or_directory_name` negated: whether the name holds a forbidden character.
fn has_invalid_char(name: &Value) -> std::result::Result<bool, Raised> {
    for c in INVALID_NAME_CHARS.chars() {
        if py_in(c.encode_utf8(&mut [0; 4]), name)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A required name argument that the Python code has by then shown to be a string.
fn string_arg<'a>(value: &'a Value, argument: &str) -> std::result::Result<&'a str, Raised> {
    value
        .as_str()
        .ok_or_else(|| format!("{argument} must be a string, not {}", type_name(value)))
}

/// Python's `str.splitlines()`.
fn splitlines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if matches!(
            c,
            '\n' | '\r'
                | '\x0b'
                | '\x0c'
                | '\x1c'
                | '\x1d'
                | '\x1e'
                | '\u{85}'
                | '\u{2028}'
                | '\u{2029}'
        ) {
            lines.push(&text[start..i]);
            let mut end = i + c.len_utf8();
            if c == '\r' && chars.peek().is_some_and(|&(_, next)| next == '\n') {
                chars.next();
                end += 1;
            }
            start = end;
        }
    }
    if start < text.len() {
        lines.push(&text[start..]);
    }
    lines
}

/// `content.splitlines()` on a file's content, or Python's `AttributeError` when it is not a
/// string.
fn lines_of(content: &Value) -> std::result::Result<Vec<&str>, Raised> {
    match content {
        Value::String(s) => Ok(splitlines(s)),
        other => Err(no_attribute(other, "splitlines")),
    }
}

/// Python's `len(value)`.
fn py_len(value: &Value) -> std::result::Result<usize, Raised> {
    match value {
        Value::String(s) => Ok(s.chars().count()),
        Value::Array(items) => Ok(items.len()),
        Value::Object(map) => Ok(map.len()),
        other => Err(format!(
            "object of type '{}' has no len()",
            type_name(other)
        )),
    }
}

/// Takes one visit from a walk's budget.
fn spend(budget: &mut usize) -> std::result::Result<(), Raised> {
    *budget = budget.checked_sub(1).ok_or_else(|| TOO_LARGE.to_owned())?;
    Ok(())
}

impl GorillaFileSystem {
    /// Loads `initial_config["GorillaFileSystem"]` as `_load_scenario` does (without the
    /// long-context padding): the first entry of `root` is the root folder, holding its
    /// `contents`; without `root`, an empty root folder named `/`.
    pub fn load(config: &Map<String, Value>) -> Result<Self> {
        let mut fs = GorillaFileSystem {
            files: Vec::new(),
            dirs: Vec::new(),
            dicts: Vec::new(),
            root: 0,
            current: 0,
        };
        let Some(scenario_root) = config.get("root") else {
            fs.root = fs.new_dir("/", None);
            fs.current = fs.root;
            return Ok(fs);
        };
        let scenario_root = scenario_root
            .as_object()
            .ok_or_else(|| bad_config("`root` is not an object"))?;
        let (name, entry) = scenario_root
            .iter()
            .next()
            .ok_or_else(|| bad_config("`root` has no entry"))?;
        let contents = entry
            .get("contents")
            .ok_or_else(|| bad_config(format!("`root.{name}` has no `contents`")))?;
        fs.root = fs.new_dir(name, None);
        fs.current = fs.root;
        fs.load_directory(contents, fs.root, name)?;
        Ok(fs)
    }

    /// `_load_directory`: the entries of `contents` into folder `dir` (`path` names it in
    /// errors). Entries of another `type` are skipped, as in Python.
    fn load_directory(&mut self, contents: &Value, dir: usize, path: &str) -> Result<()> {
        let entries = contents
            .as_object()
            .ok_or_else(|| bad_config(format!("the `contents` of `{path}` is not an object")))?;
        for (name, data) in entries {
            let here = format!("{path}/{name}");
            let kind = data
                .get("type")
                .ok_or_else(|| bad_config(format!("`{here}` has no `type`")))?;
            match kind.as_str() {
                Some("directory") => {
                    let sub = self.new_dir(name, Some(dir));
                    let sub_contents = data
                        .get("contents")
                        .ok_or_else(|| bad_config(format!("`{here}` has no `contents`")))?;
                    self.load_directory(sub_contents, sub, &here)?;
                    let dict = self.dirs[dir].contents;
                    self.dict_set(dict, name, Node::Dir(sub));
                }
                Some("file") => {
                    let content = data
                        .get("content")
                        .ok_or_else(|| bad_config(format!("`{here}` has no `content`")))?;
                    let file = self.new_file(name, content.clone());
                    let dict = self.dirs[dir].contents;
                    self.dict_set(dict, name, Node::File(file));
                }
                _ => {}
            }
        }
        Ok(())
    }

    // --- the arenas ---

    /// A new folder with a new, empty contents dict.
    fn new_dir(&mut self, name: &str, parent: Option<usize>) -> usize {
        self.dicts.push(Vec::new());
        self.dirs.push(DirObj {
            name: name.to_owned(),
            parent,
            contents: self.dicts.len() - 1,
        });
        self.dirs.len() - 1
    }

    fn new_file(&mut self, name: &str, content: Value) -> usize {
        self.files.push(FileObj {
            name: name.to_owned(),
            content,
        });
        self.files.len() - 1
    }

    fn entries(&self, dir: usize) -> &Dict {
        &self.dicts[self.dirs[dir].contents]
    }

    /// `name in dir.contents`.
    fn contains(&self, dir: usize, name: &str) -> bool {
        self.entries(dir).iter().any(|(k, _)| k == name)
    }

    /// `value in dir.contents` for an argument: the name when it is a string naming an entry
    /// (every name is a string, so no other value is one), Python's `TypeError` for a list or
    /// dict.
    fn present<'v>(
        &self,
        dir: usize,
        value: &'v Value,
    ) -> std::result::Result<Option<&'v str>, Raised> {
        Ok(pyops::hash_key(value)?.filter(|name| self.contains(dir, name)))
    }

    /// `dict[name] = node`: replaces in place, or appends.
    fn dict_set(&mut self, dict: usize, name: &str, node: Node) {
        let dict = &mut self.dicts[dict];
        match dict.iter_mut().find(|(k, _)| k == name) {
            Some(slot) => slot.1 = node,
            None => dict.push((name.to_owned(), node)),
        }
    }

    /// `dir.contents.pop(name)`.
    fn pop(&mut self, dir: usize, name: &str) {
        let dict = &mut self.dicts[self.dirs[dir].contents];
        if let Some(i) = dict.iter().position(|(k, _)| k == name) {
            dict.remove(i);
        }
    }

    /// `Directory._get_item`: `.` is the folder itself, anything else an entry.
    fn get_item(&self, dir: usize, name: &str) -> Option<Node> {
        if name == "." {
            return Some(Node::Dir(dir));
        }
        self.entries(dir)
            .iter()
            .find(|(k, _)| k == name)
            .map(|&(_, node)| node)
    }

    /// `Directory._add_file`.
    fn add_file(
        &mut self,
        dir: usize,
        name: &str,
        content: Value,
    ) -> std::result::Result<(), Raised> {
        if self.contains(dir, name) {
            return Err(format!(
                "File '{name}' already exists in directory '{}'.",
                self.dirs[dir].name
            ));
        }
        let file = self.new_file(name, content);
        let dict = self.dirs[dir].contents;
        self.dict_set(dict, name, Node::File(file));
        Ok(())
    }

    /// `Directory._add_directory`: the new folder's index.
    fn add_directory(&mut self, dir: usize, name: &str) -> std::result::Result<usize, Raised> {
        if self.contains(dir, name) {
            return Err(format!(
                "Directory '{name}' already exists in directory '{}'.",
                self.dirs[dir].name
            ));
        }
        let sub = self.new_dir(name, Some(dir));
        let dict = self.dirs[dir].contents;
        self.dict_set(dict, name, Node::Dir(sub));
        Ok(sub)
    }

    /// `_navigate_to_directory`: the folder at `path` (`None` or `.`: the current one), or the
    /// `cd` error text.
    fn navigate(&self, path: Option<&str>) -> std::result::Result<usize, String> {
        let path = match path {
            None | Some(".") => return Ok(self.current),
            Some("/") => return Ok(self.root),
            Some(path) => path,
        };
        let mut dir = if path.starts_with('/') {
            self.root
        } else {
            self.current
        };
        for name in path.trim_matches('/').split('/') {
            match self.get_item(dir, name) {
                Some(Node::Dir(next)) => dir = next,
                _ => return Err(format!("cd: '{path}': No such file or directory")),
            }
        }
        Ok(dir)
    }

    /// The content of the file `file_name` names in the current folder (the shared opening of
    /// `wc`, `sort`, `grep` and `tail`), `None` when there is no such file.
    fn local_file(&self, file_name: &Value) -> std::result::Result<Option<&Value>, Raised> {
        let Some(name) = self.present(self.current, file_name)? else {
            return Ok(None);
        };
        Ok(match self.get_item(self.current, name) {
            Some(Node::File(f)) => Some(&self.files[f].content),
            _ => None,
        })
    }

    // --- the methods ---

    fn pwd(&self) -> Outcome {
        let mut names = Vec::new();
        let mut dir = Some(self.current);
        while let Some(d) = dir {
            names.push(self.dirs[d].name.as_str());
            dir = self.dirs[d].parent;
        }
        names.reverse();
        Ok(object([(
            "current_working_directory",
            format!("/{}", names.join("/")),
        )]))
    }

    fn ls(&self, all: bool) -> Outcome {
        let names: Vec<Value> = self
            .entries(self.current)
            .iter()
            .filter(|(name, _)| all || !name.starts_with('.'))
            .map(|(name, _)| Value::String(name.clone()))
            .collect();
        Ok(object([("current_directory_content", names)]))
    }

    fn cd(&mut self, folder: &Value) -> Outcome {
        let Value::String(folder) = folder else {
            return Err(no_attribute(folder, "rstrip"));
        };
        let mut folder = folder.trim_end_matches('/');
        if folder.is_empty() {
            folder = "/";
        }
        if !matches!(folder, "." | ".." | "/") && folder.contains('/') {
            return error(format!(
                "cd: {folder}: Unsupported path. Only one folder level at a time is supported."
            ));
        }
        if folder == ".." {
            match self.dirs[self.current].parent {
                Some(parent) => self.current = parent,
                // Only the root has no parent, so the second error is out of reach as in
                // Python (which compares the folders by value there).
                None if self.current == self.root => {
                    return error("Current directory is already the root. Cannot go back.");
                }
                None => return error("cd: ..: No such directory"),
            }
            return Ok(Value::Object(Map::new()));
        }
        match self.navigate(Some(folder)) {
            Ok(dir) => {
                self.current = dir;
                Ok(object([(
                    "current_working_directory",
                    self.dirs[dir].name.clone(),
                )]))
            }
            Err(message) => error(message),
        }
    }

    fn mkdir(&mut self, dir_name: &Value) -> Outcome {
        if has_invalid_char(dir_name)? {
            return error(format!(
                "mkdir: cannot create directory '{}': Invalid character",
                str_of(dir_name)
            ));
        }
        if let Some(name) = self.present(self.current, dir_name)? {
            return error(format!(
                "mkdir: cannot create directory '{name}': File exists"
            ));
        }
        let name = string_arg(dir_name, "dir_name")?;
        self.add_directory(self.current, name)?;
        Ok(Value::Null)
    }

    fn touch(&mut self, file_name: &Value) -> Outcome {
        if has_invalid_char(file_name)? {
            return error(format!(
                "touch: cannot touch '{}': Invalid character",
                str_of(file_name)
            ));
        }
        if let Some(name) = self.present(self.current, file_name)? {
            return error(format!("touch: cannot touch '{name}': File exists"));
        }
        let name = string_arg(file_name, "file_name")?;
        self.add_file(self.current, name, Value::String(String::new()))?;
        Ok(Value::Null)
    }

    fn echo(&mut self, content: &Value, file_name: &Value) -> Outcome {
        if file_name.is_null() {
            return Ok(object([("terminal_output", content.clone())]));
        }
        if has_invalid_char(file_name)? {
            return error(format!(
                "echo: cannot write to '{}': Invalid character",
                str_of(file_name)
            ));
        }
        if !truthy(file_name) {
            return Ok(object([("terminal_output", content.clone())]));
        }
        let found = match self.present(self.current, file_name)? {
            Some(name) => self.get_item(self.current, name),
            None => None,
        };
        match found {
            Some(Node::File(f)) => {
                self.files[f].content = content.clone();
                Ok(Value::Null)
            }
            Some(Node::Dir(_)) => Err("'Directory' object has no attribute '_write'".into()),
            None => error(format!(
                "echo: cannot write to '{}': No such file",
                str_of(file_name)
            )),
        }
    }

    fn cat(&self, file_name: &Value) -> Outcome {
        if has_invalid_char(file_name)? {
            return error(format!("cat: '{}': Invalid character", str_of(file_name)));
        }
        let found = match self.present(self.current, file_name)? {
            Some(name) => self.get_item(self.current, name),
            None => None,
        };
        match found {
            Some(Node::File(f)) => Ok(object([("file_content", self.files[f].content.clone())])),
            Some(Node::Dir(_)) => error(format!("cat: '{}': Is a directory", str_of(file_name))),
            None => error(format!(
                "cat: '{}': No such file or directory",
                str_of(file_name)
            )),
        }
    }

    fn find(&self, path: &Value, name: &Value) -> Outcome {
        let target = match path {
            Value::Null => self.current,
            Value::String(p) => match self.navigate(Some(p)) {
                Ok(dir) => dir,
                Err(message) => return error(message.replacen("cd:", "find:", 1)),
            },
            other => return Err(no_attribute(other, "strip")),
        };
        let Value::String(path) = path else {
            return Err(no_attribute(path, "rstrip"));
        };
        let mut matches = Vec::new();
        let mut budget = VISIT_BUDGET;
        self.search(
            target,
            path.trim_end_matches('/'),
            name,
            0,
            &mut matches,
            &mut budget,
        )?;
        Ok(object([("matches", matches)]))
    }

    /// `find`'s recursive walk: every entry under `dir` whose name holds `name`.
    fn search(
        &self,
        dir: usize,
        base: &str,
        name: &Value,
        depth: usize,
        matches: &mut Vec<Value>,
        budget: &mut usize,
    ) -> std::result::Result<(), Raised> {
        if depth >= FIND_DEPTH {
            return Err(FIND_RECURSION.into());
        }
        for (item_name, node) in self.entries(dir) {
            spend(budget)?;
            let item_path = format!("{base}/{item_name}");
            let hit = match name {
                Value::Null => true,
                Value::String(part) => item_name.contains(part.as_str()),
                other => {
                    return Err(format!(
                        "'in <string>' requires string as left operand, not {}",
                        type_name(other)
                    ));
                }
            };
            if hit {
                matches.push(Value::String(item_path.clone()));
            }
            if let Node::Dir(sub) = *node {
                self.search(sub, &item_path, name, depth + 1, matches, budget)?;
            }
        }
        Ok(())
    }

    fn wc(&self, file_name: &Value, mode: &Value) -> Outcome {
        let mode = match mode.as_str() {
            Some(m @ ("l" | "w" | "c")) => m,
            _ => return error(format!("wc: invalid mode '{}'", str_of(mode))),
        };
        if let Some(content) = self.local_file(file_name)? {
            let (count, kind) = match mode {
                "l" => (lines_of(content)?.len(), "lines"),
                "w" => match content {
                    Value::String(s) => (
                        s.split(pyops::is_space).filter(|w| !w.is_empty()).count(),
                        "words",
                    ),
                    other => return Err(no_attribute(other, "split")),
                },
                _ => (py_len(content)?, "characters"),
            };
            let mut map = Map::new();
            map.insert("count".into(), Value::from(count));
            map.insert("type".into(), Value::from(kind));
            return Ok(Value::Object(map));
        }
        no_such_file("wc", file_name)
    }

    fn sort(&self, file_name: &Value) -> Outcome {
        if let Some(content) = self.local_file(file_name)? {
            let mut lines = lines_of(content)?;
            lines.sort_unstable();
            return Ok(object([("sorted_content", lines.join("\n"))]));
        }
        no_such_file("sort", file_name)
    }

    fn grep(&self, file_name: &Value, pattern: &Value) -> Outcome {
        if let Some(content) = self.local_file(file_name)? {
            let mut matching = Vec::new();
            for line in lines_of(content)? {
                let Value::String(pattern) = pattern else {
                    return Err(format!(
                        "'in <string>' requires string as left operand, not {}",
                        type_name(pattern)
                    ));
                };
                if line.contains(pattern.as_str()) {
                    matching.push(Value::from(line));
                }
            }
            return Ok(object([("matching_lines", matching)]));
        }
        no_such_file("grep", file_name)
    }

    fn du(&self, human_readable: bool) -> Outcome {
        let mut budget = VISIT_BUDGET;
        let total = self.size_of(self.current, 0, &mut budget)?;
        let text = if human_readable {
            let mut size = total as f64;
            let mut text = None;
            for unit in ["B", "KB", "MB", "GB", "TB"] {
                if size < 1024.0 {
                    text = Some(format!("{size:.2} {unit}"));
                    break;
                }
                size /= 1024.0;
            }
            text.unwrap_or_else(|| format!("{size:.2} PB"))
        } else {
            format!("{total} bytes")
        };
        Ok(object([("disk_usage", text)]))
    }

    /// `du`'s size of a folder: the UTF-8 bytes of every file under it.
    fn size_of(
        &self,
        dir: usize,
        depth: usize,
        budget: &mut usize,
    ) -> std::result::Result<u64, Raised> {
        if depth >= DU_DEPTH {
            return Err(DU_RECURSION.into());
        }
        let mut total: u64 = 0;
        for (_, node) in self.entries(dir) {
            spend(budget)?;
            let size = match *node {
                Node::File(f) => match &self.files[f].content {
                    Value::String(s) => s.len() as u64,
                    other => return Err(no_attribute(other, "encode")),
                },
                Node::Dir(sub) => self.size_of(sub, depth + 1, budget)?,
            };
            total = total.saturating_add(size);
        }
        Ok(total)
    }

    fn tail(&self, file_name: &Value, lines: &Value) -> Outcome {
        let Some(content) = self.local_file(file_name)? else {
            return no_such_file("tail", file_name);
        };
        let all = lines_of(content)?;
        let len = all.len() as i128;
        let mut n: i128 = match lines {
            Value::Bool(b) => i128::from(*b),
            Value::Number(x) => {
                if let Some(i) = x.as_i64() {
                    i128::from(i)
                } else if let Some(u) = x.as_u64() {
                    i128::from(u)
                } else if x.as_f64().is_some_and(|f| f > len as f64) {
                    // `lines > len(content)` holds, so `lines` becomes that int.
                    len
                } else {
                    return Err(
                        "slice indices must be integers or None or have an __index__ method".into(),
                    );
                }
            }
            other => {
                return Err(format!(
                    "'>' not supported between instances of '{}' and 'int'",
                    type_name(other)
                ));
            }
        };
        if n > len {
            n = len;
        }
        // `content[-n:]` with Python's slice clamping (`n == 0` keeps every line).
        let start = if n > 0 { len - n } else { (-n).min(len) };
        let start = usize::try_from(start).unwrap_or(0);
        let last = all.get(start..).unwrap_or_default();
        Ok(object([("last_lines", last.join("\n"))]))
    }

    fn diff(&self, file_name1: &Value, file_name2: &Value) -> Outcome {
        let cur = self.current;
        let both = match self.present(cur, file_name1)? {
            Some(name1) => self.present(cur, file_name2)?.map(|name2| (name1, name2)),
            None => None,
        };
        if let Some((name1, name2)) = both
            && let (Some(Node::File(f1)), Some(Node::File(f2))) =
                (self.get_item(cur, name1), self.get_item(cur, name2))
        {
            let lines1 = lines_of(&self.files[f1].content)?;
            let lines2 = lines_of(&self.files[f2].content)?;
            let changed: Vec<String> = lines1
                .iter()
                .zip(&lines2)
                .filter(|(a, b)| a != b)
                .map(|(a, b)| format!("- {a}\n+ {b}"))
                .collect();
            return Ok(object([("diff_lines", changed.join("\n"))]));
        }
        error(format!(
            "diff: {} or {}: No such file or directory",
            str_of(file_name1),
            str_of(file_name2)
        ))
    }

    /// `mv` and `cp`, which the Python class writes alike: the source must be an entry of the
    /// current folder; a destination naming a folder there receives it under its own name,
    /// any other destination is the new name in the current folder. `mv` then drops the source.
    fn transfer(&mut self, source: &Value, destination: &Value, kind: Transfer) -> Outcome {
        let (command, verb, done) = match kind {
            Transfer::Move => ("mv", "move", "moved"),
            Transfer::Copy => ("cp", "copy", "copied"),
        };
        let copy = matches!(kind, Transfer::Copy);
        let cur = self.current;
        let Some(src) = self.present(cur, source)? else {
            return error(format!(
                "{command}: cannot {verb} '{}': No such file or directory",
                str_of(source)
            ));
        };
        let Some(item) = self.get_item(cur, src) else {
            return error(format!(
                "{command}: cannot {verb} '{src}': Not a file or directory"
            ));
        };
        if py_in("/", destination)? {
            return error(format!(
                "{command}: path not allowed in destination. Provide only a file or directory name."
            ));
        }
        if let Some(dest) = self.present(cur, destination)? {
            let Some(Node::Dir(dest_dir)) = self.get_item(cur, dest) else {
                return error(format!(
                    "{command}: cannot {verb} '{src}' to '{dest}': Not a directory"
                ));
            };
            // `cp` looks for `destination/source` among the folder's names, which never holds
            // a `/`, so its check almost never fires (adding may raise instead).
            let taken = if copy {
                format!("{dest}/{src}")
            } else {
                src.to_owned()
            };
            if self.contains(dest_dir, &taken) {
                return error(format!(
                    "{command}: cannot {verb} '{src}' to '{dest}/{src}': File exists"
                ));
            }
            if !copy {
                self.pop(cur, src);
            }
            self.place(item, dest_dir, src, copy)?;
            return Ok(object([(
                "result",
                format!("'{src}' {done} to '{dest}/{src}'"),
            )]));
        }
        let dest = string_arg(destination, "destination")?;
        if !copy {
            self.pop(cur, src);
        }
        self.place(item, cur, dest, copy)?;
        Ok(object([("result", format!("'{src}' {done} to '{dest}'"))]))
    }

    /// The tail of `mv` and `cp`: a new file named `name` in `dir` with `item`'s content, or a
    /// new folder holding `item`'s contents dict itself (`mv`) or a shallow copy of it taken
    /// after the new folder is added (`cp`).
    fn place(
        &mut self,
        item: Node,
        dir: usize,
        name: &str,
        copy: bool,
    ) -> std::result::Result<(), Raised> {
        match item {
            Node::File(f) => {
                let content = self.files[f].content.clone();
                self.add_file(dir, name, content)
            }
            Node::Dir(d) => {
                let new = self.add_directory(dir, name)?;
                let source_dict = self.dirs[d].contents;
                self.dirs[new].contents = if copy {
                    let entries = self.dicts[source_dict].clone();
                    self.dicts.push(entries);
                    self.dicts.len() - 1
                } else {
                    source_dict
                };
                Ok(())
            }
        }
    }

    fn rm(&mut self, file_name: &Value) -> Outcome {
        match self.present(self.current, file_name)? {
            Some(name) => {
                self.pop(self.current, name);
                Ok(object([("result", format!("'{name}' removed"))]))
            }
            None => error(format!(
                "rm: cannot remove '{}': No such file or directory",
                str_of(file_name)
            )),
        }
    }

    fn rmdir(&mut self, dir_name: &Value) -> Outcome {
        let cur = self.current;
        let Some(name) = self.present(cur, dir_name)? else {
            return error(format!(
                "rmdir: cannot remove '{}': No such file or directory",
                str_of(dir_name)
            ));
        };
        match self.get_item(cur, name) {
            Some(Node::Dir(d)) if !self.entries(d).is_empty() => error(format!(
                "rmdir: cannot remove '{name}': Directory not empty"
            )),
            Some(Node::Dir(_)) => {
                self.pop(cur, name);
                Ok(object([("result", format!("'{name}' removed"))]))
            }
            _ => error(format!("rmdir: cannot remove '{name}': Not a directory")),
        }
    }

    /// A folder or file as the reference fixture writes it: `{"name", "contents"}` or
    /// `{"name", "content"}`. A walk past Python's recursion limit (a folder inside itself) or
    /// the visit budget writes `"[recursion]"` in place of the entry.
    fn node_json(&self, node: Node, depth: usize, budget: &mut usize) -> Value {
        if depth >= STATE_DEPTH || spend(budget).is_err() {
            return Value::from("[recursion]");
        }
        let mut map = Map::new();
        match node {
            Node::File(f) => {
                map.insert("name".into(), Value::from(self.files[f].name.as_str()));
                map.insert("content".into(), self.files[f].content.clone());
            }
            Node::Dir(d) => {
                map.insert("name".into(), Value::from(self.dirs[d].name.as_str()));
                let mut contents = Map::new();
                for (name, child) in self.entries(d) {
                    contents.insert(name.clone(), self.node_json(*child, depth + 1, budget));
                }
                map.insert("contents".into(), Value::Object(contents));
            }
        }
        Value::Object(map)
    }
}

impl Backend for GorillaFileSystem {
    fn class(&self) -> &'static str {
        CLASS
    }

    fn methods(&self) -> &'static [Method] {
        METHODS
    }

    fn call(&mut self, method: &str, args: &Args) -> Outcome {
        let arg = |name: &str| args.value(name);
        // An argument with a default: the given value, or the default.
        let or = |name: &str, default: Value| args.get(name).cloned().unwrap_or(default);
        match method {
            "pwd" => self.pwd(),
            "ls" => self.ls(args.get("a").is_some_and(truthy)),
            "cd" => self.cd(arg("folder")),
            "mkdir" => self.mkdir(arg("dir_name")),
            "touch" => self.touch(arg("file_name")),
            "echo" => self.echo(arg("content"), &or("file_name", Value::Null)),
            "cat" => self.cat(arg("file_name")),
            "find" => self.find(&or("path", Value::from(".")), &or("name", Value::Null)),
            "wc" => self.wc(arg("file_name"), &or("mode", Value::from("l"))),
            "sort" => self.sort(arg("file_name")),
            "grep" => self.grep(arg("file_name"), arg("pattern")),
            "du" => self.du(args.get("human_readable").is_some_and(truthy)),
            "tail" => self.tail(arg("file_name"), &or("lines", Value::from(10))),
            "diff" => self.diff(arg("file_name1"), arg("file_name2")),
            "mv" => self.transfer(arg("source"), arg("destination"), Transfer::Move),
            "rm" => self.rm(arg("file_name")),
            "rmdir" => self.rmdir(arg("dir_name")),
            "cp" => self.transfer(arg("source"), arg("destination"), Transfer::Copy),
            other => Err(pyops::attribute_error(CLASS, other)),
        }
    }

    fn state(&self) -> Map<String, Value> {
        let mut budget = VISIT_BUDGET;
        let mut state = Map::new();
        state.insert("long_context".into(), Value::Bool(false));
        state.insert(
            "root".into(),
            self.node_json(Node::Dir(self.root), 0, &mut budget),
        );
        state
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::pyops::harness::{self, script};
    use super::*;

    fn fs(config: Value) -> GorillaFileSystem {
        GorillaFileSystem::load(config.as_object().unwrap()).unwrap()
    }

    fn sample() -> GorillaFileSystem {
        fs(json!({"root": {"r": {"type": "directory", "contents": {
            "a": {"type": "directory", "contents": {
                "f.txt": {"type": "file", "content": "x\ny"}}},
            "g.txt": {"type": "file", "content": "b line\r\na line\u{b}c\u{2028} \u{1c}word  two"},
            ".hid": {"type": "file", "content": ""}}}}}))
    }

    /// Runs `method` with keyword arguments and returns the text the harness would show.
    fn run(fs: &mut GorillaFileSystem, method: &str, kwargs: Value) -> String {
        harness::call(fs, method, kwargs)
    }

    // The expected texts below are what BFCL's Python class printed for the same calls
    // (`json.dumps` of the returned dict, `str` otherwise, `Error during execution: ...`).

    #[test]
    fn copied_and_moved_folders_share_as_in_python() {
        let mut f = sample();
        script(
            &mut f,
            &[
                (
                    "cp",
                    json!({"source": "a", "destination": "b"}),
                    r#"{"result": "'a' copied to 'b'"}"#,
                ),
                (
                    "cd",
                    json!({"folder": "b"}),
                    r#"{"current_working_directory": "b"}"#,
                ),
                (
                    "echo",
                    json!({"content": "new", "file_name": "f.txt"}),
                    "None",
                ),
                ("cd", json!({"folder": ".."}), "{}"),
                (
                    "cd",
                    json!({"folder": "a"}),
                    r#"{"current_working_directory": "a"}"#,
                ),
                (
                    "cat",
                    json!({"file_name": "f.txt"}),
                    r#"{"file_content": "new"}"#,
                ),
                ("cd", json!({"folder": ".."}), "{}"),
                (
                    "mv",
                    json!({"source": "a", "destination": "c"}),
                    r#"{"result": "'a' moved to 'c'"}"#,
                ),
                (
                    "cd",
                    json!({"folder": "c"}),
                    r#"{"current_working_directory": "c"}"#,
                ),
                ("mkdir", json!({"dir_name": "m"}), "None"),
                ("pwd", json!({}), r#"{"current_working_directory": "/r/c"}"#),
                ("cd", json!({"folder": ".."}), "{}"),
                (
                    "ls",
                    json!({}),
                    r#"{"current_directory_content": ["g.txt", "b", "c"]}"#,
                ),
                (
                    "find",
                    json!({}),
                    r#"{"matches": ["./g.txt", "./.hid", "./b", "./b/f.txt", "./c", "./c/f.txt", "./c/m"]}"#,
                ),
            ],
        );
        let root = &f.state()["root"];
        assert_eq!(root["contents"]["b"]["contents"]["f.txt"]["content"], "new");
        assert_eq!(root["contents"]["c"]["contents"]["f.txt"]["content"], "new");

        // A moved folder's children still name the old, detached folder as their parent.
        let mut f = fs(json!({"root": {"r": {"type": "directory", "contents": {
            "a": {"type": "directory", "contents": {"s": {"type": "directory", "contents": {}}}}}}}}));
        script(
            &mut f,
            &[
                (
                    "mv",
                    json!({"source": "a", "destination": "c"}),
                    r#"{"result": "'a' moved to 'c'"}"#,
                ),
                (
                    "cd",
                    json!({"folder": "c"}),
                    r#"{"current_working_directory": "c"}"#,
                ),
                (
                    "cd",
                    json!({"folder": "s"}),
                    r#"{"current_working_directory": "s"}"#,
                ),
                ("cd", json!({"folder": ".."}), "{}"),
                ("pwd", json!({}), r#"{"current_working_directory": "/r/a"}"#),
                ("touch", json!({"file_name": "t"}), "None"),
                ("cd", json!({"folder": ".."}), "{}"),
                (
                    "find",
                    json!({}),
                    r#"{"matches": ["./c", "./c/s", "./c/t"]}"#,
                ),
            ],
        );
    }

    #[test]
    fn a_folder_named_dot_and_folders_inside_themselves() {
        let mut f = sample();
        script(
            &mut f,
            &[
                ("mkdir", json!({"dir_name": "."}), "None"),
                (
                    "ls",
                    json!({}),
                    r#"{"current_directory_content": ["a", "g.txt"]}"#,
                ),
                (
                    "ls",
                    json!({"a": true}),
                    r#"{"current_directory_content": ["a", "g.txt", ".hid", "."]}"#,
                ),
                (
                    "cat",
                    json!({"file_name": "."}),
                    r#"{"error": "cat: '.': Is a directory"}"#,
                ),
                (
                    "rmdir",
                    json!({"dir_name": "."}),
                    r#"{"error": "rmdir: cannot remove '.': Directory not empty"}"#,
                ),
                (
                    "echo",
                    json!({"content": "z", "file_name": "."}),
                    "Error during execution: 'Directory' object has no attribute '_write'",
                ),
                (
                    "mv",
                    json!({"source": ".", "destination": "q"}),
                    r#"{"result": "'.' moved to 'q'"}"#,
                ),
                (
                    "ls",
                    json!({"a": true}),
                    r#"{"current_directory_content": ["a", "g.txt", ".hid", "q"]}"#,
                ),
                (
                    "du",
                    json!({}),
                    "Error during execution: maximum recursion depth exceeded",
                ),
            ],
        );
        let mut f = sample();
        script(
            &mut f,
            &[
                (
                    "cp",
                    json!({"source": "a", "destination": "a"}),
                    r#"{"result": "'a' copied to 'a/a'"}"#,
                ),
                (
                    "find",
                    json!({}),
                    "Error during execution: maximum recursion depth exceeded while calling a Python object",
                ),
                (
                    "du",
                    json!({}),
                    "Error during execution: maximum recursion depth exceeded",
                ),
                (
                    "ls",
                    json!({}),
                    r#"{"current_directory_content": ["a", "g.txt"]}"#,
                ),
            ],
        );
        // The state stays finite where Python's would recurse without end.
        assert!(f.state()["root"].to_string().contains("[recursion]"));
    }

    #[test]
    fn text_tools_split_lines_and_words_as_python() {
        let mut f = sample();
        script(
            &mut f,
            &[
                (
                    "wc",
                    json!({"file_name": "g.txt"}),
                    r#"{"count": 5, "type": "lines"}"#,
                ),
                (
                    "wc",
                    json!({"file_name": "g.txt", "mode": "w"}),
                    r#"{"count": 7, "type": "words"}"#,
                ),
                (
                    "wc",
                    json!({"file_name": "g.txt", "mode": "c"}),
                    r#"{"count": 28, "type": "characters"}"#,
                ),
                (
                    "wc",
                    json!({"file_name": "g.txt", "mode": "x"}),
                    r#"{"error": "wc: invalid mode 'x'"}"#,
                ),
                (
                    "sort",
                    json!({"file_name": "g.txt"}),
                    r#"{"sorted_content": " \na line\nb line\nc\nword  two"}"#,
                ),
                (
                    "grep",
                    json!({"file_name": "g.txt", "pattern": "line"}),
                    r#"{"matching_lines": ["b line", "a line"]}"#,
                ),
                (
                    "tail",
                    json!({"file_name": "g.txt", "lines": 0}),
                    r#"{"last_lines": "b line\na line\nc\n \nword  two"}"#,
                ),
                (
                    "tail",
                    json!({"file_name": "g.txt", "lines": -1}),
                    r#"{"last_lines": "a line\nc\n \nword  two"}"#,
                ),
                (
                    "tail",
                    json!({"file_name": "g.txt", "lines": 2}),
                    r#"{"last_lines": " \nword  two"}"#,
                ),
                (
                    "tail",
                    json!({"file_name": "g.txt", "lines": true}),
                    r#"{"last_lines": "word  two"}"#,
                ),
                (
                    "tail",
                    json!({"file_name": "g.txt", "lines": 2.0}),
                    "Error during execution: slice indices must be integers or None or have an __index__ method",
                ),
                (
                    "tail",
                    json!({"file_name": "g.txt", "lines": 9.5}),
                    r#"{"last_lines": "b line\na line\nc\n \nword  two"}"#,
                ),
                (
                    "tail",
                    json!({"file_name": "g.txt", "lines": null}),
                    "Error during execution: '>' not supported between instances of 'NoneType' and 'int'",
                ),
                ("du", json!({}), r#"{"disk_usage": "33 bytes"}"#),
                (
                    "du",
                    json!({"human_readable": true}),
                    r#"{"disk_usage": "33.00 B"}"#,
                ),
                (
                    "diff",
                    json!({"file_name1": "g.txt", "file_name2": ".hid"}),
                    r#"{"diff_lines": ""}"#,
                ),
                (
                    "diff",
                    json!({"file_name1": "nope", "file_name2": ["x"]}),
                    r#"{"error": "diff: nope or ['x']: No such file or directory"}"#,
                ),
                (
                    "diff",
                    json!({"file_name1": "g.txt", "file_name2": ["x"]}),
                    "Error during execution: unhashable type: 'list'",
                ),
            ],
        );
    }

    #[test]
    fn wrong_argument_types_fail_as_in_python() {
        let mut f = sample();
        script(
            &mut f,
            &[
                (
                    "cd",
                    json!({"folder": null}),
                    "Error during execution: 'NoneType' object has no attribute 'rstrip'",
                ),
                (
                    "mkdir",
                    json!({"dir_name": ["/"]}),
                    r#"{"error": "mkdir: cannot create directory '['/']': Invalid character"}"#,
                ),
                (
                    "mkdir",
                    json!({"dir_name": ["x"]}),
                    "Error during execution: unhashable type: 'list'",
                ),
                (
                    "touch",
                    json!({"file_name": 3}),
                    "Error during execution: argument of type 'int' is not iterable",
                ),
                (
                    "echo",
                    json!({"content": "hi", "file_name": ""}),
                    r#"{"terminal_output": "hi"}"#,
                ),
                (
                    "echo",
                    json!({"content": "hi", "file_name": []}),
                    r#"{"terminal_output": "hi"}"#,
                ),
                ("echo", json!({"content": 5, "file_name": "g.txt"}), "None"),
                (
                    "cat",
                    json!({"file_name": "g.txt"}),
                    r#"{"file_content": 5}"#,
                ),
                (
                    "wc",
                    json!({"file_name": "g.txt", "mode": "c"}),
                    "Error during execution: object of type 'int' has no len()",
                ),
                (
                    "du",
                    json!({}),
                    "Error during execution: 'int' object has no attribute 'encode'",
                ),
                (
                    "rm",
                    json!({"file_name": 5}),
                    r#"{"error": "rm: cannot remove '5': No such file or directory"}"#,
                ),
                (
                    "rm",
                    json!({"file_name": ["a"]}),
                    "Error during execution: unhashable type: 'list'",
                ),
                (
                    "mv",
                    json!({"source": "g.txt", "destination": 5}),
                    "Error during execution: argument of type 'int' is not iterable",
                ),
                (
                    "mv",
                    json!({"source": "g.txt", "destination": ["/"]}),
                    r#"{"error": "mv: path not allowed in destination. Provide only a file or directory name."}"#,
                ),
                (
                    "cp",
                    json!({"source": "nope", "destination": "x"}),
                    r#"{"error": "cp: cannot copy 'nope': No such file or directory"}"#,
                ),
                (
                    "cp",
                    json!({"source": "g.txt", "destination": "a"}),
                    r#"{"result": "'g.txt' copied to 'a/g.txt'"}"#,
                ),
                (
                    "cp",
                    json!({"source": "g.txt", "destination": "a"}),
                    "Error during execution: File 'g.txt' already exists in directory 'a'.",
                ),
                (
                    "find",
                    json!({"path": 5}),
                    "Error during execution: 'int' object has no attribute 'strip'",
                ),
                (
                    "find",
                    json!({"path": null}),
                    "Error during execution: 'NoneType' object has no attribute 'rstrip'",
                ),
                (
                    "find",
                    json!({"path": "/nope"}),
                    r#"{"error": "find: '/nope': No such file or directory"}"#,
                ),
                (
                    "find",
                    json!({"path": "/", "name": 3}),
                    "Error during execution: 'in <string>' requires string as left operand, not int",
                ),
                (
                    "find",
                    json!({"path": "/r/a/"}),
                    r#"{"error": "find: '/r/a/': No such file or directory"}"#,
                ),
                (
                    "cd",
                    json!({"folder": "a/b"}),
                    r#"{"error": "cd: a/b: Unsupported path. Only one folder level at a time is supported."}"#,
                ),
                (
                    "cd",
                    json!({"folder": "../"}),
                    r#"{"error": "Current directory is already the root. Cannot go back."}"#,
                ),
                (
                    "cd",
                    json!({"folder": ""}),
                    r#"{"current_working_directory": "r"}"#,
                ),
            ],
        );
    }

    #[test]
    fn the_default_root_and_human_readable_sizes() {
        let mut f = fs(json!({}));
        script(
            &mut f,
            &[
                ("pwd", json!({}), r#"{"current_working_directory": "//"}"#),
                ("mkdir", json!({"dir_name": "x"}), "None"),
                (
                    "cd",
                    json!({"folder": "x"}),
                    r#"{"current_working_directory": "x"}"#,
                ),
                ("pwd", json!({}), r#"{"current_working_directory": "///x"}"#),
                ("cd", json!({"folder": ".."}), "{}"),
                (
                    "du",
                    json!({"human_readable": true}),
                    r#"{"disk_usage": "0.00 B"}"#,
                ),
            ],
        );
        assert_eq!(
            Value::Object(f.state()),
            json!({"long_context": false, "root": {"name": "/", "contents": {
                "x": {"name": "x", "contents": {}}}}})
        );
        // Python: f"{size:.2f}" after dividing by 1024 until below 1024.
        for (bytes, want) in [
            (1023, "1023.00 B"),
            (1024, "1.00 KB"),
            (1152, "1.12 KB"),
            (1153, "1.13 KB"),
            (1536, "1.50 KB"),
            (1_000_000, "976.56 KB"),
            (1_310_720, "1.25 MB"),
        ] {
            let mut f = fs(json!({"root": {"r": {"type": "directory", "contents": {
                "f": {"type": "file", "content": "a".repeat(bytes)}}}}}));
            assert_eq!(
                run(&mut f, "du", json!({"human_readable": true})),
                format!(r#"{{"disk_usage": "{want}"}}"#)
            );
        }
    }

    #[test]
    fn bad_configs_are_errors() {
        for config in [
            json!({"root": []}),
            json!({"root": {}}),
            json!({"root": {"r": {"type": "directory"}}}),
            json!({"root": {"r": {"contents": {"x": {"content": "a"}}}}}),
            json!({"root": {"r": {"contents": {"x": {"type": "file"}}}}}),
            json!({"root": {"r": {"contents": []}}}),
        ] {
            assert!(
                GorillaFileSystem::load(config.as_object().unwrap()).is_err(),
                "{config}"
            );
        }
    }
}
