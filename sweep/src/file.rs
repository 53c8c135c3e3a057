//! The sweep file: which scenario kind the base is, the base itself, and the points (a grid of
//! axes, explicit points, or both). Read once ([`Sweep::from_file`]), checked once: every axis
//! value and every explicit point is overlaid on the base and deserialised through the
//! scenario's raw types before anything runs, so a misspelt field or a value of the wrong type
//! is an error naming the axis, not a column of failed rows.
//!
//! ```toml
//! kind = "simulate"            # or "serve"
//! [base]                       # a scenario as `kvplan simulate FILE` reads it
//! model = "opt-6.7b"           #   (or: base_file = "scenarios/x.toml", relative to this file)
//! hardware = "a100-40g-pcie4"
//! [axes]                       # cartesian product, first axis outermost, last fastest
//! hardware = ["a100-40g-pcie4", "h100-pcie"]
//! "workload.batch" = [8, 16, 32]
//! [[points]]                   # explicit points, after the grid
//! "workload.batch" = 64
//! "offload.split" = 100
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use kvplan_run::{RawScenario, rebase};
use serde::Deserialize;
use toml::{Table, Value};

/// Which scenario the base is, and so which engine runs each point: the sweep file's `kind`, or
/// its base's (the scenario's own `kind` key); where both are written they must agree.
pub use kvplan_vocab::RunKind as Kind;

/// Why a sweep file cannot be used. Each message names the file, the part at fault and the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SweepError {
    /// The sweep file (or its `base_file`) could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Not valid TOML, or an unknown top-level field, or one of the wrong type.
    #[error("{}{}: {message}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The line at fault (1-based), where the parser knows it.
        line: Option<usize>,
        /// What the parser said, on one line.
        message: String,
    },
    /// `kind` missing or unknown.
    #[error("{}: kind: {message}; write kind = \"simulate\" (op-level: planner and simulator) or kind = \"serve\" (serving simulator)", path.display())]
    Kind {
        /// The sweep file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The base scenario is missing, given twice, or not a valid scenario.
    #[error("{}: base: {message}", path.display())]
    Base {
        /// The sweep file.
        path: PathBuf,
        /// What is wrong, with the fix.
        message: String,
    },
    /// An axis is not a non-empty array, names no scenario field, or holds a value the field
    /// does not accept.
    #[error("{}: axes.\"{axis}\": {message}", path.display())]
    Axis {
        /// The sweep file.
        path: PathBuf,
        /// The axis (its dotted path).
        axis: String,
        /// What is wrong, with the fix.
        message: String,
    },
    /// An explicit point names no scenario field or holds a value the field does not accept.
    #[error("{}: points[{index}]: {message}", path.display())]
    Point {
        /// The sweep file.
        path: PathBuf,
        /// The point's position in `[[points]]` (0-based).
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// Neither axes nor points.
    #[error("{}: nothing to sweep: add an [axes] table (e.g. \"workload.batch\" = [8, 16]) or [[points]]", path.display())]
    Empty {
        /// The sweep file.
        path: PathBuf,
    },
}

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSweep {
    kind: Option<String>,
    base: Option<Table>,
    base_file: Option<PathBuf>,
    axes: Option<Table>,
    points: Option<Vec<Table>>,
}

/// One axis: a dotted scenario path and its values.
#[derive(Debug, Clone)]
struct Axis {
    values: Vec<Value>,
}

/// The values an explicit point sets: (column, value).
type Assigned = Vec<(usize, Value)>;

/// A checked sweep: the base scenario (relative paths made relative to the directory it was
/// written in), the axes and the explicit points. Points are numbered from 0: the grid first
/// (first axis outermost), then `[[points]]` in file order.
#[derive(Debug, Clone)]
pub struct Sweep {
    kind: Kind,
    base: Table,
    dir: PathBuf,
    /// Column names: the axes' paths, then keys only explicit points set.
    columns: Vec<String>,
    /// The axes, one per leading column.
    axes: Vec<Axis>,
    /// Explicit points.
    points: Vec<Assigned>,
    /// Points of the grid (0 without axes), saturating.
    grid_len: u64,
    /// The resolved sweep's hash, which its fingerprint carries.
    pub(crate) hash: String,
}

fn one_line(s: &str) -> String {
    s.trim().replace('\n', " ")
}

fn parse_error(path: &Path, text: &str, e: &toml::de::Error) -> SweepError {
    SweepError::Parse {
        path: path.to_path_buf(),
        line: kvplan_vocab::error::toml_line(text, e),
        message: one_line(e.message()),
    }
}

/// A TOML value's type in words.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "a string",
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a float",
        Value::Boolean(_) => "a boolean",
        Value::Datetime(_) => "a date-time",
        Value::Array(_) => "an array",
        Value::Table(_) => "a table",
    }
}

/// Sets `value` at the dotted `path` of `table`, creating tables on the way; a table value is
/// merged into a table already there (so `workload = {batch = 8}` keeps the base's prompt).
pub(crate) fn set_path(table: &mut Table, path: &str, value: Value) -> Result<(), String> {
    let parts: Vec<&str> = path.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(format!("'{path}' is not a dotted field path"));
    }
    let mut t = table;
    for (i, part) in parts[..parts.len() - 1].iter().enumerate() {
        let entry = t
            .entry(part.to_string())
            .or_insert_with(|| Value::Table(Table::new()));
        t = match entry {
            Value::Table(inner) => inner,
            other => {
                return Err(format!(
                    "cannot set '{path}': '{}' is {}, not a table",
                    parts[..=i].join("."),
                    type_name(other)
                ));
            }
        };
    }
    let last = parts[parts.len() - 1];
    match (t.get_mut(last), value) {
        (Some(Value::Table(old)), Value::Table(new)) => {
            for (k, v) in new {
                set_path(old, &k, v)?;
            }
        }
        (_, v) => {
            t.insert(last.to_string(), v);
        }
    }
    Ok(())
}

/// The leaves of `table` by dotted path (tables are walked, every other value is a leaf).
fn flatten(prefix: &str, table: &Table, out: &mut Vec<(String, Value)>) {
    for (k, v) in table {
        let p = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            Value::Table(t) => flatten(&p, t, out),
            other => out.push((p, other.clone())),
        }
    }
}

/// The dotted paths of a table's leaves in the order they are written (toml's own tables are
/// sorted by key).
fn written_order(prefix: &str, table: &dyn toml_edit::TableLike, out: &mut Vec<String>) {
    for (k, item) in table.iter() {
        let p = if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        };
        match item.as_table_like() {
            Some(t) => written_order(&p, t, out),
            None => out.push(p),
        }
    }
}

/// `leaves` in the order of `order` (leaves `order` does not name keep their sorted order at
/// the end; that happens only if the two parsers disagree).
fn in_written_order(leaves: Vec<(String, Value)>, order: &[String]) -> Vec<(String, Value)> {
    let mut by_path: HashMap<String, Value> = HashMap::new();
    let mut rest = Vec::new();
    for (p, v) in leaves {
        if order.contains(&p) {
            by_path.insert(p, v);
        } else {
            rest.push((p, v));
        }
    }
    let mut out: Vec<(String, Value)> = order
        .iter()
        .filter_map(|p| by_path.remove(p).map(|v| (p.clone(), v)))
        .collect();
    out.extend(rest);
    out
}

fn has_newline(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains(['\n', '\r']),
        Value::Array(a) => a.iter().any(has_newline),
        Value::Table(t) => t.values().any(has_newline),
        _ => false,
    }
}

/// The first value in `v` that is a NaN or an infinity, as written.
fn non_finite(v: &Value) -> Option<String> {
    match v {
        Value::Float(x) if !x.is_finite() => Some(v.to_string()),
        Value::Array(a) => a.iter().find_map(non_finite),
        Value::Table(t) => t.values().find_map(non_finite),
        _ => None,
    }
}

/// How the scenario `table` of `kind` fails to resolve as a single run resolves it, if it
/// does: the one-line message, and the field it names (if it names one).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Unresolved {
    message: String,
    field: Option<String>,
}

impl Unresolved {
    /// Resolves `table` (a point's scenario).
    fn of(kind: Kind, table: Table) -> Option<Unresolved> {
        let e = RawScenario::from_table(table, kind)
            .and_then(RawScenario::resolve)
            .err()?;
        Some(Unresolved {
            message: one_line(&e.to_string()),
            field: e.field(),
        })
    }

    /// Whether this is the same failure as `other`: the same field named, or, where neither
    /// names one, the same message.
    fn same_as(&self, other: &Unresolved) -> bool {
        match (&self.field, &other.field) {
            (Some(a), Some(b)) => a == b,
            (None, None) => self.message == other.message,
            _ => false,
        }
    }

    /// Whether the failure is the fault of the field `field` (its dotted path) of `table` (the
    /// scenario that failed): the error names that field (or a field below it).
    ///
    /// A model or GPU that cannot be loaded is named by its value, not its field ("unknown
    /// hardware 'x'"): such an error counts where it quotes the value the field holds.
    fn names(&self, table: &Table, field: &str) -> bool {
        match &self.field {
            Some(f) => f == field || f.starts_with(&format!("{field}.")),
            None => {
                let value = lookup(table, field).and_then(Value::as_str);
                self.message.starts_with(&format!("{field}:"))
                    || value.is_some_and(|v| !v.is_empty() && self.message.contains(v))
            }
        }
    }
}

/// The points checked one by one before a sweep is refused because every point fails the same
/// way ([`Sweep::fails_everywhere`]); beyond them, the probes (every axis value, every
/// explicit point) stand for the rest.
const CONFIRM_POINTS: u64 = 1_000;

/// The value at the dotted `path` of `table`.
fn lookup<'t>(table: &'t Table, path: &str) -> Option<&'t Value> {
    let mut parts = path.split('.');
    let mut v = table.get(parts.next()?)?;
    for p in parts {
        v = v.as_table()?.get(p)?;
    }
    Some(v)
}

/// Deserialises `table` as the raw scenario of `kind` (unknown fields and wrong types are
/// errors, named by serde).
pub(crate) fn check(kind: Kind, table: &Table) -> Result<(), String> {
    RawScenario::from_table(table.clone(), kind)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// The files the sweep file at `path` reads: itself and its `base_file`, if it names one (and
/// it can be read; a sweep file that cannot be is reported when it is read for the run).
pub fn input_files(path: &Path) -> Vec<PathBuf> {
    let mut files = vec![path.to_path_buf()];
    let base = std::fs::read_to_string(path)
        .ok()
        .and_then(|t| toml::from_str::<Table>(&t).ok())
        .and_then(|t| t.get("base_file")?.as_str().map(PathBuf::from));
    if let Some(f) = base {
        let dir = path.parent().unwrap_or(Path::new(""));
        files.push(if f.is_relative() { dir.join(f) } else { f });
    }
    files
}

/// FNV-1a, 64 bits: stable across platforms and releases (std's hashers are not). The hash of
/// a resolved sweep, which its fingerprint carries.
pub(crate) fn fnv1a(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

fn base_error(path: &Path, message: String) -> SweepError {
    SweepError::Base {
        path: path.to_path_buf(),
        message,
    }
}

fn kind_error(path: &Path, message: String) -> SweepError {
    SweepError::Kind {
        path: path.to_path_buf(),
        message,
    }
}

/// The sweep file's own `kind`, if it writes one.
fn read_kind(path: &Path, kind: Option<&str>) -> Result<Option<Kind>, SweepError> {
    match kind {
        Some("simulate") => Ok(Some(Kind::Simulate)),
        Some("serve") => Ok(Some(Kind::Serve)),
        Some(other) => Err(kind_error(path, format!("unknown kind '{other}'"))),
        None => Ok(None),
    }
}

/// The kind of the sweep: the file's, or its base's; where both are written they must agree.
fn agreed_kind(path: &Path, sweep_kind: Option<Kind>, base: &Table) -> Result<Kind, SweepError> {
    match (sweep_kind, Kind::of(base).map_err(|m| base_error(path, m))?) {
        (Some(a), Some(b)) if a != b => Err(kind_error(
            path,
            format!(
                "kind = \"{}\" but its base says kind = \"{}\"",
                a.as_str(),
                b.as_str()
            ),
        )),
        (Some(k), _) | (None, Some(k)) => Ok(k),
        (None, None) => Err(kind_error(path, "missing".into())),
    }
}

/// The base scenario as read: the sweep file's `[base]` or its `base_file`.
struct Base {
    table: Table,
    /// The directory its relative paths are relative to.
    dir: PathBuf,
    /// Where it was written when not in the sweep file (`None`: the sweep file's `[base]`),
    /// with its text, for the place of a field the parser refuses.
    file: Option<(PathBuf, String)>,
}

impl Base {
    /// Reads the base: exactly one of `[base]` and `base_file` (relative to `dir`, the sweep
    /// file's directory).
    fn read(
        path: &Path,
        dir: &Path,
        sweep_kind: Option<Kind>,
        table: Option<Table>,
        file: Option<PathBuf>,
    ) -> Result<Base, SweepError> {
        match (table, file) {
            (Some(_), Some(_)) => Err(base_error(
                path,
                "give either a [base] table or base_file, not both".into(),
            )),
            (None, None) => Err(base_error(
                path,
                format!(
                    "missing; add a [base] table holding the scenario (as `kvplan {} FILE` reads it) or base_file = \"scenario.toml\"",
                    sweep_kind.map_or("simulate|serve", Kind::as_str)
                ),
            )),
            (Some(table), None) => Ok(Base {
                table,
                dir: dir.to_path_buf(),
                file: None,
            }),
            (None, Some(f)) => {
                let f = if f.is_relative() { dir.join(f) } else { f };
                let text = std::fs::read_to_string(&f).map_err(|source| SweepError::Read {
                    path: f.clone(),
                    source,
                })?;
                let table: Table = toml::from_str(&text).map_err(|e| parse_error(&f, &text, &e))?;
                Ok(Base {
                    table,
                    dir: f.parent().unwrap_or(Path::new("")).to_path_buf(),
                    file: Some((f, text)),
                })
            }
        }
    }

    /// The base with its relative paths made relative to the sweep's directory, checked as a
    /// scenario of `kind`; a field it refuses is named with its line in the file that wrote
    /// it (`text`: the sweep file's, read from `path`).
    fn check(self, text: &str, path: &Path, kind: Kind) -> Result<Table, SweepError> {
        let mut base_value = Value::Table(self.table);
        rebase(kind, "", &mut base_value, &self.dir);
        let Value::Table(base) = base_value else {
            unreachable!("a table stays a table")
        };
        let Err(message) = check(kind, &base) else {
            return Ok(base);
        };
        // The base parsed again from its text: the field's line and key, which a type or
        // range error does not name ("invalid value: integer `-1`").
        let located = match &self.file {
            None => kvplan_run::locate(text, kind, Some("base")).map(|mut f| {
                f.key = f.key.map(|k| format!("base.{k}"));
                (path.to_path_buf(), f)
            }),
            Some((f, t)) => kvplan_run::locate(t, kind, None).map(|e| (f.clone(), e)),
        };
        Err(match located.filter(|(_, f)| f.message == message) {
            Some((file, f)) => {
                // A message that names its field itself (an unknown field) still says it
                // is the base's.
                let keyed = f.keyed();
                let message = if self.file.is_none() && keyed == f.message {
                    format!("base: {keyed}")
                } else {
                    keyed
                };
                SweepError::Parse {
                    path: file,
                    line: f.line,
                    message,
                }
            }
            None => base_error(path, message),
        })
    }
}

/// The order in which each explicit point's fields are written (toml's tables sort them).
fn point_orders(doc: Option<&toml_edit::DocumentMut>) -> Vec<Vec<String>> {
    let Some(item) = doc.and_then(|d| d.get("points")) else {
        return Vec::new();
    };
    let tables: Vec<&dyn toml_edit::TableLike> = match item {
        toml_edit::Item::ArrayOfTables(a) => {
            a.iter().map(|t| t as &dyn toml_edit::TableLike).collect()
        }
        toml_edit::Item::Value(toml_edit::Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_inline_table())
            .map(|t| t as &dyn toml_edit::TableLike)
            .collect(),
        _ => Vec::new(),
    };
    tables
        .into_iter()
        .map(|t| {
            let mut o = Vec::new();
            written_order("", t, &mut o);
            o
        })
        .collect()
}

/// What the axes and points of a sweep file are checked against: the file (for messages), its
/// directory, its kind and its checked base.
#[derive(Clone, Copy)]
struct Reader<'a> {
    path: &'a Path,
    dir: &'a Path,
    kind: Kind,
    base: &'a Table,
}

impl Reader<'_> {
    fn axis_error(&self, axis: &str, message: String) -> SweepError {
        SweepError::Axis {
            path: self.path.to_path_buf(),
            axis: axis.to_string(),
            message,
        }
    }

    /// Sets the value `v` of the column `name` in `t` (its paths made relative to the sweep's
    /// directory).
    fn overlay(&self, t: &mut Table, name: &str, v: &Value) -> Result<(), String> {
        let mut v = v.clone();
        rebase(self.kind, name, &mut v, self.dir);
        set_path(t, name, v)
    }

    /// The axes in the order written, each a non-empty array whose every value the base
    /// accepts; their names are the first columns.
    fn axes(
        &self,
        table: Table,
        doc: Option<&toml_edit::DocumentMut>,
    ) -> Result<(Vec<String>, Vec<Axis>), SweepError> {
        let mut leaves = Vec::new();
        flatten("", &table, &mut leaves);
        let mut order = Vec::new();
        if let Some(t) = doc.and_then(|d| d.get("axes")?.as_table_like()) {
            written_order("", t, &mut order);
        }
        let mut columns: Vec<String> = Vec::new();
        let mut axes = Vec::new();
        for (name, v) in in_written_order(leaves, &order) {
            let values = match v {
                Value::Array(a) if a.is_empty() => {
                    return Err(self.axis_error(
                        &name,
                        "is empty; give at least one value, or remove the axis".into(),
                    ));
                }
                Value::Array(a) => a,
                other => {
                    return Err(self.axis_error(
                        &name,
                        format!(
                            "must be an array of values (got {}); write \"{name}\" = [{other}] for a single value",
                            type_name(&other)
                        ),
                    ));
                }
            };
            if columns.contains(&name) {
                return Err(self.axis_error(&name, "is given twice".into()));
            }
            self.check_axis_values(&name, &values)?;
            columns.push(name);
            axes.push(Axis { values });
        }
        Ok((columns, axes))
    }

    /// Each value of the axis `name` on one line, finite, and of a type the base accepts.
    fn check_axis_values(&self, name: &str, values: &[Value]) -> Result<(), SweepError> {
        for (j, v) in values.iter().enumerate() {
            if has_newline(v) {
                return Err(self.axis_error(name, format!("value {j} holds a line break")));
            }
            if let Some(bad) = non_finite(v) {
                return Err(
                    self.axis_error(name, format!("value {j} ({bad}): not a finite number"))
                );
            }
            let mut t = self.base.clone();
            self.overlay(&mut t, name, v)
                .and_then(|()| check(self.kind, &t))
                .map_err(|m| self.axis_error(name, format!("value {j}: {m}")))?;
        }
        Ok(())
    }

    /// How each axis value resolves with the other axes at their first values (`None`: it
    /// resolves).
    ///
    /// Each axis value is checked as a flag would be (a known model and GPU, sizes in range):
    /// an error that names the axis's own field is the value's fault and stops the sweep
    /// before it starts. Errors of a combination (another field, or a plan that does not fit)
    /// stay error rows.
    fn probe_axes(
        &self,
        columns: &[String],
        axes: &[Axis],
    ) -> Result<Vec<Option<Unresolved>>, SweepError> {
        let mut probes = Vec::new();
        for (a, axis) in axes.iter().enumerate() {
            let name = &columns[a];
            for (j, v) in axis.values.iter().enumerate() {
                let mut t = self.base.clone();
                for (b, other) in axes.iter().enumerate() {
                    let v = if a == b { v } else { &other.values[0] };
                    self.overlay(&mut t, &columns[b], v)
                        .map_err(|m| self.axis_error(name, m))?;
                }
                let failed = Unresolved::of(self.kind, t.clone());
                if let Some(u) = failed.as_ref().filter(|u| u.names(&t, name)) {
                    return Err(self.axis_error(name, format!("value {j} ({v}): {}", u.message)));
                }
                probes.push(failed);
            }
        }
        Ok(probes)
    }

    /// The explicit point `index` (`p`, its fields written in `order`) as (column, value)
    /// pairs, new fields added to `columns` and to `resolved`, with how it resolves (`None`:
    /// it does). Refused where a value is not one line, not finite, not of a type the base
    /// accepts, or the point fails by a field it sets itself.
    fn point(
        &self,
        index: usize,
        p: Table,
        order: Option<&Vec<String>>,
        columns: &mut Vec<String>,
        resolved: &mut String,
    ) -> Result<(Assigned, Option<Unresolved>), SweepError> {
        let point_error = |message: String| SweepError::Point {
            path: self.path.to_path_buf(),
            index,
            message,
        };
        let mut leaves = Vec::new();
        flatten("", &p, &mut leaves);
        if leaves.is_empty() {
            return Err(point_error(
                "is empty; give at least one field = value".into(),
            ));
        }
        let leaves = match order {
            Some(o) => in_written_order(leaves, o),
            None => leaves,
        };
        let mut t = self.base.clone();
        let mut assigned = Vec::new();
        for (name, v) in leaves {
            if has_newline(&v) {
                return Err(point_error(format!("{name} holds a line break")));
            }
            if let Some(bad) = non_finite(&v) {
                return Err(point_error(format!("{name} ({bad}): not a finite number")));
            }
            let col = match columns.iter().position(|c| *c == name) {
                Some(c) => c,
                None => {
                    columns.push(name.clone());
                    columns.len() - 1
                }
            };
            self.overlay(&mut t, &name, &v).map_err(point_error)?;
            resolved.push_str(&format!("point {index} {name:?} = {v}\n"));
            assigned.push((col, v));
        }
        if let Err(m) = check(self.kind, &t) {
            // The field at fault: the first the base refuses on its own (a type or range
            // error does not name its field: "invalid value: integer `-1`").
            let alone = |col: usize, v: &Value| {
                let mut t = self.base.clone();
                self.overlay(&mut t, &columns[col], v).is_ok() && check(self.kind, &t).is_err()
            };
            return Err(point_error(
                match assigned.iter().find(|(col, v)| alone(*col, v)) {
                    Some((col, v)) => format!("{} ({v}): {m}", columns[*col]),
                    None => m,
                },
            ));
        }
        let failed = Unresolved::of(self.kind, t.clone());
        if let Some(u) = &failed {
            for (col, v) in &assigned {
                if u.names(&t, &columns[*col]) {
                    let m = &u.message;
                    return Err(point_error(format!("{} ({v}): {m}", columns[*col])));
                }
            }
        }
        Ok((assigned, failed))
    }
}

impl Sweep {
    /// Reads and checks a sweep file.
    pub fn from_file(path: &Path) -> Result<Sweep, SweepError> {
        let text = std::fs::read_to_string(path).map_err(|source| SweepError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Sweep::parse(&text, path)
    }

    /// Checks the text of a sweep file read from `path` (named in messages; relative paths in
    /// it are relative to its directory): its kind and base, then its axes and explicit points,
    /// each value overlaid on the base and checked, then the sweep as a whole.
    pub fn parse(text: &str, path: &Path) -> Result<Sweep, SweepError> {
        let raw: RawSweep = toml::from_str(text).map_err(|e| parse_error(path, text, &e))?;
        let doc: Option<toml_edit::DocumentMut> = text.parse().ok();
        let dir = path.parent().unwrap_or(Path::new("")).to_path_buf();
        let sweep_kind = read_kind(path, raw.kind.as_deref())?;
        let base = Base::read(path, &dir, sweep_kind, raw.base, raw.base_file)?;
        let kind = agreed_kind(path, sweep_kind, &base.table)?;
        // What the fingerprint hashes: the sweep as resolved, paths as written (so the same
        // sweep run from another directory is the same sweep).
        let mut resolved = format!(
            "kind = {:?}\n[base]\n{}",
            kind.as_str(),
            toml::to_string(&base.table).unwrap_or_default()
        );
        let table = base.check(text, path, kind)?;
        let reader = Reader {
            path,
            dir: &dir,
            kind,
            base: &table,
        };
        let (mut columns, axes) = reader.axes(raw.axes.unwrap_or_default(), doc.as_ref())?;
        for (name, axis) in columns.iter().zip(&axes) {
            resolved.push_str(&format!(
                "axis {name:?} = {}\n",
                Value::Array(axis.values.clone())
            ));
        }
        // How each probe fails to resolve (`None`: it resolves): every axis value with the
        // other axes at their first values, and every explicit point.
        let mut probes = reader.probe_axes(&columns, &axes)?;
        let raw_points = raw.points.unwrap_or_default();
        let orders = point_orders(doc.as_ref());
        let mut points = Vec::new();
        for (index, p) in raw_points.into_iter().enumerate() {
            let (assigned, failed) =
                reader.point(index, p, orders.get(index), &mut columns, &mut resolved)?;
            probes.push(failed);
            points.push(assigned);
        }
        Sweep::build(reader, columns, axes, points, &resolved, &probes)
    }

    /// The checked parts as one sweep: refused when it has no point, or when every point
    /// fails the same way (the base's fault, [`Sweep::fails_everywhere`]).
    fn build(
        reader: Reader<'_>,
        columns: Vec<String>,
        axes: Vec<Axis>,
        points: Vec<Assigned>,
        resolved: &str,
        probes: &[Option<Unresolved>],
    ) -> Result<Sweep, SweepError> {
        let path = reader.path;
        if axes.is_empty() && points.is_empty() {
            return Err(SweepError::Empty {
                path: path.to_path_buf(),
            });
        }
        let grid_len = if axes.is_empty() {
            0
        } else {
            axes.iter()
                .fold(1u64, |n, a| n.saturating_mul(a.values.len() as u64))
        };
        let sweep = Sweep {
            kind: reader.kind,
            base: reader.base.clone(),
            dir: reader.dir.to_path_buf(),
            columns,
            axes,
            points,
            grid_len,
            hash: fnv1a(resolved),
        };
        if let Some(u) = sweep.fails_everywhere(probes) {
            let what = u
                .field
                .map_or_else(String::new, |f| format!(" (no axis or point sets {f})"));
            return Err(base_error(
                path,
                format!(
                    "{}; every point of the sweep fails this way{what}: fix it in the base",
                    u.message
                ),
            ));
        }
        Ok(sweep)
    }

    /// The failure every point of the sweep shares, if there is one: a setting the base lacks
    /// or gets wrong that no axis or point changes (a required field not given, say), which
    /// would make every row an error with the same reason. `probes` are how every axis value
    /// (with the other axes at their first values) and every explicit point resolve; where all
    /// fail the same way, every point is checked too (the first [`CONFIRM_POINTS`]), so a
    /// combination of values that resolves keeps the sweep running. Failures of a point's own
    /// values, or that only running finds (a plan that does not fit), are not this: they stay
    /// error rows.
    fn fails_everywhere(&self, probes: &[Option<Unresolved>]) -> Option<Unresolved> {
        let first = probes.first()?.clone()?;
        if !probes
            .iter()
            .all(|p| p.as_ref().is_some_and(|p| p.same_as(&first)))
        {
            return None;
        }
        for i in 0..self.len().min(CONFIRM_POINTS) {
            let t = self.scenario(i).ok()?;
            if !Unresolved::of(self.kind, t).is_some_and(|u| u.same_as(&first)) {
                return None;
            }
        }
        Some(first)
    }

    /// Which engine runs the points.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Points in all: the grid's, then the explicit ones (saturating at `u64::MAX`).
    pub fn len(&self) -> u64 {
        self.grid_len.saturating_add(self.points.len() as u64)
    }

    /// Never true: a checked sweep has at least one point.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The columns that identify a point: the axes' dotted paths in the order written, then the
    /// fields only explicit points set, in order of first appearance.
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// The values point `index` sets, by column (`None` where it sets nothing: an explicit point
    /// leaves the axes it does not name at the base's value).
    ///
    /// # Panics
    /// If `index` is not below [`len`](Self::len).
    pub fn values(&self, index: u64) -> Vec<Option<&Value>> {
        assert!(index < self.len(), "point {index} of {}", self.len());
        let mut out = vec![None; self.columns.len()];
        if index < self.grid_len {
            let mut rem = index;
            for (c, axis) in self.axes.iter().enumerate().rev() {
                let n = axis.values.len() as u64;
                out[c] = Some(&axis.values[(rem % n) as usize]);
                rem /= n;
            }
        } else {
            for (c, v) in &self.points[(index - self.grid_len) as usize] {
                out[*c] = Some(v);
            }
        }
        out
    }

    /// Every value the column `col` takes: its axis's values, then what explicit points set.
    pub(crate) fn column_values(&self, col: usize) -> impl Iterator<Item = &Value> {
        let axis = self.axes.get(col).map(|a| a.values.iter());
        axis.into_iter().flatten().chain(
            self.points
                .iter()
                .flat_map(move |p| p.iter().filter(move |(c, _)| *c == col).map(|(_, v)| v)),
        )
    }

    /// The scenario table of point `index`: the base with the point's values overlaid.
    pub fn scenario(&self, index: u64) -> Result<Table, String> {
        let mut t = self.base.clone();
        for (c, v) in self.values(index).into_iter().enumerate() {
            if let Some(v) = v {
                let name = &self.columns[c];
                let mut v = v.clone();
                rebase(self.kind, name, &mut v, &self.dir);
                set_path(&mut t, name, v)?;
            }
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep(text: &str) -> Result<Sweep, SweepError> {
        Sweep::parse(text, Path::new("dir/s.toml"))
    }

    const BASE: &str =
        "kind = \"simulate\"\n[base]\nmodel = \"opt-1.3b\"\nhardware = \"a100-40g-pcie4\"\n";

    #[test]
    fn grid_is_in_written_order_last_axis_fastest() {
        let s = sweep(&format!(
            "{BASE}[axes]\nstrategy = [\"kvpr\", \"full-transfer\"]\n\"workload.batch\" = [1, 2, 3]\n"
        ))
        .unwrap();
        assert_eq!(s.columns(), ["strategy", "workload.batch"]);
        assert_eq!(s.len(), 6);
        let v = s.values(4);
        assert_eq!(v[0].unwrap().as_str(), Some("full-transfer"));
        assert_eq!(v[1].unwrap().as_integer(), Some(2));
        let t = s.scenario(4).unwrap();
        assert_eq!(t["workload"]["batch"].as_integer(), Some(2));
        assert_eq!(t["model"].as_str(), Some("opt-1.3b"));
    }

    #[test]
    fn points_follow_the_grid_and_add_columns() {
        let s = sweep(&format!(
            "{BASE}[axes]\n\"workload.batch\" = [1]\n[[points]]\n\"workload.prompt\" = 64\n\"workload.batch\" = 4\n"
        ))
        .unwrap();
        assert_eq!(s.columns(), ["workload.batch", "workload.prompt"]);
        assert_eq!(s.len(), 2);
        let v = s.values(1);
        assert_eq!(v[0].unwrap().as_integer(), Some(4));
        assert_eq!(v[1].unwrap().as_integer(), Some(64));
    }

    #[test]
    fn nested_axes_are_dotted_paths_and_tables_merge() {
        let s = sweep(&format!(
            "{BASE}workload = {{ prompt = 64 }}\n[axes]\nworkload.batch = [1, 2]\n"
        ))
        .unwrap();
        assert_eq!(s.columns(), ["workload.batch"]);
        let t = s.scenario(1).unwrap();
        assert_eq!(t["workload"]["prompt"].as_integer(), Some(64));
        assert_eq!(t["workload"]["batch"].as_integer(), Some(2));
    }

    #[test]
    fn the_base_may_say_its_kind_and_the_two_must_agree() {
        // No sweep-level kind: the base's own `kind` decides.
        let s = sweep(
            "[base]\nkind = \"serve\"\nmodel = \"llama-2-7b\"\nhardware = \"a100-80g-sxm\"\nworkload = { arrivals = \"poisson\", prompt_lengths = \"64\", requests = 10 }\n[axes]\n\"workload.qps\" = [1.0, 2.0]\n",
        )
        .unwrap();
        assert_eq!(s.kind(), Kind::Serve);
        let e = sweep(&format!(
            "{BASE}kind = \"serve\"\n[axes]\n\"workload.batch\" = [1]\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("kind = \"simulate\" but its base says kind = \"serve\""),
            "{e}"
        );
    }

    #[test]
    fn bad_files_name_the_part_at_fault() {
        let e = |text: &str| sweep(text).unwrap_err().to_string();
        let unknown = e(&format!("{BASE}[axes]\n\"workload.batchh\" = [1]\n"));
        assert!(
            unknown.starts_with(
                "dir/s.toml: axes.\"workload.batchh\": value 0: unknown field `batchh`"
            ),
            "{unknown}"
        );
        let empty = e(&format!("{BASE}[axes]\nstrategy = []\n"));
        assert!(empty.contains("axes.\"strategy\": is empty"), "{empty}");
        let scalar = e(&format!("{BASE}[axes]\nstrategy = \"kvpr\"\n"));
        assert!(scalar.contains("must be an array"), "{scalar}");
        let typ = e(&format!("{BASE}[axes]\n\"workload.batch\" = [1, \"x\"]\n"));
        assert!(typ.contains("value 1: invalid type"), "{typ}");
        let through = e(&format!("{BASE}[axes]\n\"model.name\" = [1]\n"));
        assert!(
            through.contains("'model' is a string, not a table"),
            "{through}"
        );
        assert!(e(BASE).contains("nothing to sweep"));
        assert!(e("[base]\n[axes]\na = [1]\n").contains("kind: missing"));
        assert!(e("kind = \"simulate\"\n[axes]\na = [1]\n").contains("base: missing"));
        assert!(e("kind = \"simulate\"\nbase = 3\n").starts_with("dir/s.toml:2:"));
        let top = e(&format!("{BASE}[axis]\n"));
        assert!(top.contains("unknown field `axis`"), "{top}");
    }

    #[test]
    fn a_base_every_point_fails_on_is_refused_naming_the_field() {
        let serve = "kind = \"serve\"\n[base]\nmodel = \"llama-2-7b\"\nhardware = \"a100-80g-sxm\"\nworkload = { arrivals = \"poisson\", qps = 2, requests = 10 }\n";
        let e = |text: String| sweep(&text).unwrap_err().to_string();
        let grid = e(format!("{serve}[axes]\n\"workload.seed\" = [1, 2]\n"));
        assert!(
            grid.starts_with("dir/s.toml: base: workload.prompt_lengths: required")
                && grid.ends_with("; every point of the sweep fails this way (no axis or point sets workload.prompt_lengths): fix it in the base"),
            "{grid}"
        );
        let points = e(format!("{serve}[[points]]\n\"workload.seed\" = 3\n"));
        assert!(
            points.contains("every point of the sweep fails"),
            "{points}"
        );
        // An axis or a point that sets it: the points without it stay error rows.
        for fix in [
            "[axes]\n\"workload.prompt_lengths\" = [\"64\", \"128\"]\n",
            "[axes]\n\"workload.seed\" = [1, 2]\n[[points]]\n\"workload.prompt_lengths\" = \"64\"\n",
        ] {
            sweep(&format!("{serve}{fix}")).unwrap();
        }
    }

    #[test]
    fn relative_paths_follow_the_file_that_writes_them() {
        // A real profile at p/h.toml beside the sweep file: axis values are resolved at load.
        let dir = std::env::temp_dir().join(format!("kvplan-sweep-rel-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("p")).unwrap();
        let profile = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../vocab/profiles/h100-sxm.toml"
        );
        std::fs::copy(profile, dir.join("p/h.toml")).unwrap();
        let s = Sweep::parse(
            "kind = \"serve\"\n[base]\nmodel = \"llama-2-7b\"\nhardware = \"a100-80g-sxm\"\n[axes]\n\"workload.trace\" = [\"t.csv\"]\nhardware = [\"p/h.toml\", \"h100-sxm\"]\n",
            &dir.join("s.toml"),
        )
        .unwrap();
        let t = s.scenario(0).unwrap();
        let at = |f: &str| dir.join(f).display().to_string();
        assert_eq!(t["workload"]["trace"].as_str(), Some(at("t.csv").as_str()));
        assert_eq!(t["hardware"].as_str(), Some(at("p/h.toml").as_str()));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            s.scenario(1).unwrap()["hardware"].as_str(),
            Some("h100-sxm")
        );
        // The row shows the value as written.
        assert_eq!(s.values(0)[0].unwrap().as_str(), Some("t.csv"));
    }

    #[test]
    fn a_million_points_are_counted_not_built() {
        let ten = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]";
        let s = sweep(&format!(
            "{BASE}[axes]\n\"workload.batch\" = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n\"offload.split\" = {ten}\n\"workload.prompt\" = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n\"workload.gen\" = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n\"runahead.devices\" = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n\"headinfer.chunk\" = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"
        ))
        .unwrap();
        assert_eq!(s.len(), 1_000_000);
        assert_eq!(s.values(999_999)[1].unwrap().as_integer(), Some(9));
    }
}
