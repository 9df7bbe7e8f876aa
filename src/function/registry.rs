//! The functions folder: `functions/<name>/function.toml` declares one task type and how to
//! call it. Every file is read and checked before the worker starts; a bad file is an error that
//! names the file and the field, and nothing runs.
//!
//! ```toml
//! type = "media"              # default: the folder name
//! command = ["./run"]         # or: url = "http://127.0.0.1:9000/media"
//! mode = "warm"               # executables: long-lived instances ("fork": one process per call, the default)
//! instances = 4               # warm: processes at most (default 1)
//! concurrency = 50             # warm: calls in flight on one instance at once (default 1)
//! send_ahead = 32              # warm, concurrency 1: calls queued on an instance (default 32)
//! max_calls_per_instance = 1000 # warm: replace an instance after this many calls (optional)
//! timeout = "90s"             # per call: seconds (90) or a duration ("90s", "10m"); default 1 h
//! build = ["cargo", "build"]  # run once in the folder when the worker starts (optional)
//! secret_env = "MEDIA_SECRET" # HTTP only: HMAC-SHA256 key, read from this variable
//! [settings]                  # task type settings; the ones not named are left as they are
//! initial_stage = "probe"
//! max_retry_num = 3
//! max_processing_time = "2m"  # durations here too: seconds or a duration string
//!
//! [[schedules]]               # periodic tasks of this type, set when the worker starts
//! name = "media.nightly"
//! cron = "0 3 * * *"          # five fields, six with seconds first, or @hourly and the like
//! time_zone = "Europe/Paris"  # optional, as are context, priority, queue_key, stage,
//! context = { scan = true }   # missed (skip | last | all), max_catch_up and paused
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use toml::Value;

use super::exec::{ExecFunction, MAX_REPLY_BYTES_DEFAULT};
use super::http::HttpFunction;
use super::warm::{WarmFunction, WarmOptions, IDLE_STOP};
use super::Function;
use crate::error::{Error, Result};
use crate::ids::TypeName;
use crate::schedule::{Missed, ScheduleSpec, SetSchedule};
use crate::task_type::TaskTypeUpdate;

/// A call's timeout when its function.toml gives none. A call's lease is extended by heartbeats
/// for as long as the call runs, so without a bound a call that hangs would hold its task for
/// ever; an hour leaves room for long stages (a transcode), and `timeout` sets another.
pub const TIMEOUT_DEFAULT: Duration = Duration::from_secs(3600);

/// The longest `timeout`: a year.
const TIMEOUT_MAX_SECS: u64 = 31_536_000;

/// The keys of a function.toml that hold a duration, and whether each takes whole seconds only.
/// Each is a number of seconds, or a string: a duration (`"90s"`, `"10m"`, `"1h 30m"`, `"500ms"`)
/// or a number (`"1.5"`), with a leading `-` for a negative one (`max_retry_interval`'s uniform
/// back-off). The ranges are checked where the value is used.
const DURATION_KEYS: [(&[&str], Whole); 5] = [
    (&["timeout"], Whole::No),
    (&["settings", "schedule_interval"], Whole::No),
    (&["settings", "max_processing_time"], Whole::Yes),
    (&["settings", "max_retry_interval"], Whole::Yes),
    (&["settings", "retention"], Whole::Yes),
];

/// Whether a duration key takes whole seconds only (the setting is an integer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Whole {
    Yes,
    No,
}

/// A duration string as seconds: `"90s"`, `"10m"`, `"1h 30m"`, `"1.5"`, `"-2s"`.
fn duration_secs(text: &str) -> std::result::Result<f64, String> {
    let trimmed = text.trim();
    let (sign, magnitude) = match trimmed.strip_prefix('-') {
        Some(rest) => (-1.0, rest.trim_start()),
        None => (1.0, trimmed),
    };
    let secs = match humantime::parse_duration(magnitude) {
        Ok(d) => Some(d.as_secs_f64()),
        Err(_) => magnitude.parse::<f64>().ok().filter(|s| s.is_finite() && *s >= 0.0),
    };
    secs.map(|s| sign * s).ok_or_else(|| {
        format!(
            "{} is not a duration: give seconds (90) or a duration (\"90s\", \"10m\", \"1h 30m\")",
            crate::error::echo(text)
        )
    })
}

/// Rewrites the duration keys given as strings (`timeout = "30s"`) into numbers of seconds, so
/// the settings keep one type; a string that is not a duration is an error naming its key.
fn durations_as_seconds(file: &Path, table: &mut toml::Table) -> Result<()> {
    for (path, whole) in DURATION_KEYS {
        let Some((key, parents)) = path.split_last() else { continue };
        let mut at = Some(&mut *table);
        for parent in parents {
            at = at.and_then(|t| t.get_mut(*parent)).and_then(Value::as_table_mut);
        }
        let Some(slot) = at.and_then(|t| t.get_mut(*key)) else { continue };
        let Value::String(text) = slot else { continue };
        let name = path.join(".");
        let secs = duration_secs(text).map_err(|why| bad(file, &name, &why))?;
        let value = match whole {
            Whole::No => Value::Float(secs),
            Whole::Yes if secs.fract() == 0.0 && secs.abs() <= i64::MAX as f64 => Value::Integer(secs as i64),
            Whole::Yes => {
                return Err(bad(file, &name, &format!("{} is not a whole number of seconds", crate::error::echo(text))))
            }
        };
        *slot = value;
    }
    Ok(())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FunctionToml {
    #[serde(rename = "type")]
    task_type: Option<String>,
    command: Option<Vec<String>>,
    url: Option<String>,
    mode: Option<String>,
    instances: Option<i64>,
    concurrency: Option<i64>,
    send_ahead: Option<i64>,
    max_calls_per_instance: Option<i64>,
    timeout: Option<f64>,
    build: Option<Vec<String>>,
    secret_env: Option<String>,
    description: Option<String>,
    #[serde(default)]
    settings: TaskTypeUpdate,
    #[serde(default)]
    schedules: Vec<ScheduleToml>,
}

/// One `[[schedules]]` entry: a schedule of the file's own type.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScheduleToml {
    name: String,
    cron: String,
    context: Option<serde_json::Value>,
    priority: Option<i32>,
    queue_key: Option<String>,
    stage: Option<String>,
    time_zone: Option<String>,
    missed: Option<Missed>,
    max_catch_up: Option<i32>,
    paused: Option<bool>,
}

/// How a function is called.
#[derive(Debug, Clone, PartialEq)]
pub enum FunctionKind {
    /// A program; `argv[0]` resolved against the folder when relative.
    Exec {
        /// Program and arguments.
        argv: Vec<String>,
        /// Warm mode (long-lived instances); None: one process per call.
        warm: Option<Warm>,
    },
    /// An HTTP endpoint.
    Http {
        /// Where to POST.
        url: String,
        /// Signing key, when configured.
        secret: Option<Vec<u8>>,
    },
}

/// Most `instances` of a warm function.
pub const INSTANCES_MAX: i64 = 1024;
/// Most calls in flight on one warm instance (`concurrency`).
pub const CONCURRENCY_MAX: i64 = 10_000;
/// Calls queued on a warm instance's stdin while it serves one (`send_ahead`), by default.
pub const SEND_AHEAD_DEFAULT: usize = 32;
/// Most calls queued on a warm instance's stdin (`send_ahead`).
pub const SEND_AHEAD_MAX: i64 = 1_000;

/// An executable's warm mode (`mode = "warm"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warm {
    /// Processes at most (`instances`, default 1).
    pub instances: usize,
    /// Calls in flight on one instance at once (`concurrency`, default 1).
    pub concurrency: usize,
    /// With `concurrency` 1: calls queued on an instance's stdin while it serves one
    /// (`send_ahead`, default [`SEND_AHEAD_DEFAULT`]; 0 with `concurrency` above 1).
    pub send_ahead: usize,
    /// Calls an instance serves before it is replaced (`max_calls_per_instance`).
    pub max_calls_per_instance: Option<u64>,
}

/// One checked `function.toml`.
#[derive(Debug, Clone)]
pub struct FunctionSpec {
    /// The file it came from.
    pub file: PathBuf,
    /// The folder (working directory of executables).
    pub dir: PathBuf,
    /// The task type it serves.
    pub task_type: TypeName,
    /// How to call it.
    pub kind: FunctionKind,
    /// Per-call timeout (`timeout`, else [`TIMEOUT_DEFAULT`]).
    pub timeout: Duration,
    /// Build command run once at start.
    pub build: Option<Vec<String>>,
    /// Type settings to apply at start.
    pub settings: TaskTypeUpdate,
    /// Schedules (name, cron and spec) of this type to set at start.
    pub schedules: Vec<(String, SetSchedule)>,
    /// Free text.
    pub description: Option<String>,
    /// The variable its HMAC key is read from (HTTP functions).
    pub secret_env: Option<String>,
    /// Variables its process must not inherit (executables): the signing keys of the folder's
    /// HTTP functions, set by [`load_dir`].
    pub hidden_env: Vec<String>,
}

impl FunctionSpec {
    /// The callable function.
    pub fn function(&self) -> Result<Arc<dyn Function>> {
        match &self.kind {
            FunctionKind::Exec { argv, warm: None } => Ok(Arc::new(
                ExecFunction::new(self.task_type.to_string(), argv.clone(), self.dir.clone(), MAX_REPLY_BYTES_DEFAULT)
                    .hiding(self.hidden_env.clone()),
            )),
            FunctionKind::Exec { argv, warm: Some(warm) } => Ok(Arc::new(WarmFunction::new(
                self.task_type.to_string(),
                argv.clone(),
                self.dir.clone(),
                self.hidden_env.clone(),
                WarmOptions {
                    instances: warm.instances,
                    concurrency: warm.concurrency,
                    send_ahead: warm.send_ahead,
                    max_calls_per_instance: warm.max_calls_per_instance,
                    timeout: Some(self.timeout),
                    max_reply: MAX_REPLY_BYTES_DEFAULT,
                    idle_stop: IDLE_STOP,
                },
            ))),
            FunctionKind::Http { url, secret } => {
                let url = reqwest::Url::parse(url).map_err(|e| bad(&self.file, "url", &e.to_string()))?;
                let f = HttpFunction::new(url, Some(self.timeout), secret.clone(), MAX_REPLY_BYTES_DEFAULT)
                    .map_err(|e| bad(&self.file, "url", &e))?;
                Ok(Arc::new(f))
            }
        }
    }

    /// The timeout the worker puts around a whole call: none for a warm function, whose
    /// timeout runs from when an instance receives the call (it may wait for a free one).
    pub fn call_timeout(&self) -> Option<Duration> {
        match self.kind {
            FunctionKind::Exec { warm: Some(_), .. } => None,
            _ => Some(self.timeout),
        }
    }

    /// Runs the build command, if any, in the function's folder.
    pub async fn build(&self) -> Result<()> {
        let Some((program, args)) = self.build.as_ref().and_then(|b| b.split_first()) else { return Ok(()) };
        tracing::info!(file = %self.file.display(), "building function: {}", self.build.as_ref().map(|b| b.join(" ")).unwrap_or_default());
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args).current_dir(&self.dir).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let cannot_run = |e: std::io::Error| bad(&self.file, "build", &format!("cannot run {program}: {e}"));
        // registered as awaited, so that a worker running as PID 1 never reaps it itself
        let (child, _awaited) = crate::reaper::spawn(&mut cmd).map_err(cannot_run)?;
        let out = child.wait_with_output().await.map_err(cannot_run)?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(10).collect();
            return Err(bad(
                &self.file,
                "build",
                &format!("{} failed: {}", program, tail.into_iter().rev().collect::<Vec<_>>().join("\n")),
            ));
        }
        Ok(())
    }
}

/// `text` read as a function.toml; an error names the key whose value was refused
/// (`settings.max_retry_num`), or the line when the file is not TOML at all.
fn parse_toml(file: &Path, text: &str) -> Result<FunctionToml> {
    let refused = |path: String, error: toml::de::Error| {
        let why = error.message().trim();
        match error.span() {
            _ if path != "." => bad(file, &path, why),
            Some(span) => {
                let line = text.get(..span.start).map_or(0, |t| t.matches('\n').count()) + 1;
                Error::Config(format!("{} line {line}: {why}", file.display()))
            }
            None => Error::Config(format!("{}: {why}", file.display())),
        }
    };
    let mut table: toml::Table = toml::from_str(text).map_err(|e| refused(".".into(), e))?;
    durations_as_seconds(file, &mut table)?;
    serde_path_to_error::deserialize(Value::Table(table)).map_err(|e| {
        let path = e.path().to_string();
        refused(path, e.into_inner())
    })
}

fn bad(file: &Path, field: &str, why: &str) -> Error {
    Error::Config(format!("{}: {field}: {why}", file.display()))
}

/// Reads and checks one `function.toml`. Environment variables named by `secret_env` are read
/// here, once.
pub fn load_file(file: &Path) -> Result<FunctionSpec> {
    let text = std::fs::read_to_string(file).map_err(|e| Error::Config(format!("{}: {e}", file.display())))?;
    let parsed: FunctionToml = parse_toml(file, &text)?;
    let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
    let dir = std::path::absolute(&dir).map_err(|e| bad(file, "path", &e.to_string()))?;
    let folder = dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let type_text = parsed.task_type.clone().unwrap_or(folder);
    let task_type = TypeName::new(&type_text).map_err(|e| bad(file, "type", &e.to_string()))?;

    let kind = match (parsed.command, parsed.url) {
        (Some(_), Some(_)) => return Err(bad(file, "command", "give either command or url, not both")),
        (None, None) => {
            return Err(bad(file, "command", "missing: give command = [\"./run\"] or url = \"http://...\""))
        }
        (Some(argv), None) => {
            if parsed.secret_env.is_some() {
                return Err(bad(file, "secret_env", "only HTTP functions (url) are signed"));
            }
            let Some(program) = argv.first() else { return Err(bad(file, "command", "must not be empty")) };
            let resolved = if program.starts_with("./") || program.starts_with("../") {
                let path = dir.join(program.strip_prefix("./").unwrap_or(program));
                if parsed.build.is_none() {
                    check_executable(&path).map_err(|why| bad(file, "command", &why))?;
                }
                path.to_string_lossy().to_string()
            } else {
                program.clone()
            };
            let mut argv = argv;
            argv[0] = resolved;
            let warm = match parsed.mode.as_deref() {
                None | Some("fork") => None,
                Some("warm") => {
                    let concurrency = match parsed.concurrency {
                        None => 1,
                        Some(n) if (1..=CONCURRENCY_MAX).contains(&n) => n as usize,
                        Some(_) => {
                            return Err(bad(file, "concurrency", &format!("must be between 1 and {CONCURRENCY_MAX}")))
                        }
                    };
                    let send_ahead =
                        match parsed.send_ahead {
                            None if concurrency > 1 => 0,
                            None => SEND_AHEAD_DEFAULT,
                            Some(_) if concurrency > 1 => return Err(bad(
                                file,
                                "send_ahead",
                                "only an instance serving one call at a time (concurrency = 1) has calls sent ahead",
                            )),
                            Some(n) if (0..=SEND_AHEAD_MAX).contains(&n) => n as usize,
                            Some(_) => {
                                return Err(bad(file, "send_ahead", &format!("must be between 0 and {SEND_AHEAD_MAX}")))
                            }
                        };
                    Some(Warm {
                        instances: match parsed.instances {
                            None => 1,
                            Some(n) if (1..=INSTANCES_MAX).contains(&n) => n as usize,
                            Some(_) => {
                                return Err(bad(file, "instances", &format!("must be between 1 and {INSTANCES_MAX}")))
                            }
                        },
                        concurrency,
                        send_ahead,
                        max_calls_per_instance: match parsed.max_calls_per_instance {
                            None => None,
                            Some(n) if n >= 1 => Some(n as u64),
                            Some(_) => return Err(bad(file, "max_calls_per_instance", "must be at least 1")),
                        },
                    })
                }
                Some(other) => {
                    return Err(bad(
                        file,
                        "mode",
                        &format!("must be \"warm\" or \"fork\", got {}", crate::error::echo(other)),
                    ))
                }
            };
            if warm.is_none() {
                for (field, given) in [
                    ("instances", parsed.instances.is_some()),
                    ("concurrency", parsed.concurrency.is_some()),
                    ("send_ahead", parsed.send_ahead.is_some()),
                    ("max_calls_per_instance", parsed.max_calls_per_instance.is_some()),
                ] {
                    if given {
                        return Err(bad(file, field, "only warm functions (mode = \"warm\") have instances"));
                    }
                }
            }
            FunctionKind::Exec { argv, warm }
        }
        (None, Some(url)) => {
            for (field, given) in [
                ("mode", parsed.mode.is_some()),
                ("instances", parsed.instances.is_some()),
                ("concurrency", parsed.concurrency.is_some()),
                ("send_ahead", parsed.send_ahead.is_some()),
                ("max_calls_per_instance", parsed.max_calls_per_instance.is_some()),
            ] {
                if given {
                    return Err(bad(file, field, "only executables (command) have a mode"));
                }
            }
            let parsed_url = reqwest::Url::parse(&url).map_err(|e| bad(file, "url", &e.to_string()))?;
            if !matches!(parsed_url.scheme(), "http" | "https") {
                return Err(bad(file, "url", "must be http:// or https://"));
            }
            let secret = match &parsed.secret_env {
                None => None,
                Some(var) => match std::env::var(var) {
                    Ok(v) if !v.is_empty() => Some(v.into_bytes()),
                    _ => return Err(bad(file, "secret_env", &format!("environment variable {var} is unset or empty"))),
                },
            };
            FunctionKind::Http { url, secret }
        }
    };
    let timeout = match parsed.timeout {
        None => TIMEOUT_DEFAULT,
        Some(t) => Duration::try_from_secs_f64(t)
            .ok()
            .filter(|d| !d.is_zero() && d.as_secs() <= TIMEOUT_MAX_SECS)
            .ok_or_else(|| bad(file, "timeout", "must be more than zero and at most a year (31536000 s)"))?,
    };
    if let Some(build) = &parsed.build {
        if build.is_empty() {
            return Err(bad(file, "build", "must not be empty"));
        }
    }
    let mut schedules = Vec::with_capacity(parsed.schedules.len());
    for s in parsed.schedules {
        let spec = ScheduleSpec {
            task_type: Some(task_type.to_string()),
            context: s.context,
            priority: s.priority,
            queue_key: s.queue_key,
            stage: s.stage,
            time_zone: s.time_zone,
            missed: s.missed,
            max_catch_up: s.max_catch_up,
            paused: s.paused,
            ..Default::default()
        };
        let set = SetSchedule { cron: s.cron, spec };
        crate::schedule::check_name(&s.name).map_err(|why| bad(file, "schedules", &why))?;
        set.check().map_err(|why| bad(file, &format!("schedules {:?}", s.name), &why))?;
        schedules.push((s.name, set));
    }
    Ok(FunctionSpec {
        file: file.to_path_buf(),
        dir,
        task_type,
        kind,
        timeout,
        build: parsed.build,
        settings: parsed.settings,
        schedules,
        description: parsed.description,
        secret_env: parsed.secret_env,
        hidden_env: Vec::new(),
    })
}

fn check_executable(path: &Path) -> std::result::Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(path) {
        Err(e) => Err(format!("{}: {e}", path.display())),
        Ok(m) if !m.is_file() => Err(format!("{} is not a file", path.display())),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => Err(format!("{} is not executable (chmod +x)", path.display())),
        Ok(_) => Ok(()),
    }
}

/// Every `*/function.toml` under `dir`, checked, by type name. Two files for one type is an error.
pub fn load_dir(dir: &Path) -> Result<BTreeMap<TypeName, FunctionSpec>> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| Error::Config(format!("functions folder {}: {e}", dir.display())))?;
    let mut files: Vec<PathBuf> =
        entries.flatten().map(|e| e.path().join("function.toml")).filter(|p| p.is_file()).collect();
    files.sort();
    let mut specs: BTreeMap<TypeName, FunctionSpec> = BTreeMap::new();
    for file in files {
        let spec = load_file(&file)?;
        if let Some(other) = specs.get(&spec.task_type) {
            return Err(bad(
                &file,
                "type",
                &format!("type {} is already served by {}", spec.task_type, other.file.display()),
            ));
        }
        specs.insert(spec.task_type.clone(), spec);
    }
    if specs.is_empty() {
        return Err(Error::Config(format!("no */function.toml in {}", dir.display())));
    }
    // an executable is not handed the keys that sign the calls of the folder's HTTP functions
    let keys: Vec<String> = specs.values().filter_map(|s| s.secret_env.clone()).collect();
    for spec in specs.values_mut() {
        spec.hidden_env = keys.clone();
    }
    Ok(specs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, toml: &str) -> PathBuf {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        let run = d.join("run");
        std::fs::write(&run, "#!/bin/sh\necho '{\"result\": 1}'\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
        let f = d.join("function.toml");
        std::fs::write(&f, toml).unwrap();
        f
    }

    #[test]
    fn a_good_file_is_read_with_defaults_from_the_folder() {
        let tmp = std::env::temp_dir().join(format!("af-reg-{}", uuid::Uuid::new_v4().simple()));
        let f =
            write(&tmp, "echo", "command = [\"./run\", \"--fast\"]\ntimeout = 2.5\n[settings]\nmax_retry_num = 4\n");
        let spec = load_file(&f).unwrap();
        assert_eq!(spec.task_type.as_str(), "echo");
        assert_eq!(spec.timeout, Duration::from_millis(2500));
        assert_eq!(spec.settings.max_retry_num, Some(4));
        match spec.kind {
            FunctionKind::Exec { argv, warm } => {
                assert!(argv[0].ends_with("echo/run"));
                assert_eq!(argv[1], "--fast");
                assert_eq!(warm, None);
            }
            other => panic!("{other:?}"),
        }
        let _ = std::fs::remove_dir_all(tmp);
    }

    #[test]
    fn durations_are_seconds_or_duration_strings_and_a_call_without_a_timeout_gets_the_default() {
        let tmp = std::env::temp_dir().join(format!("af-reg-{}", uuid::Uuid::new_v4().simple()));
        let f = write(
            &tmp,
            "strings",
            "command = [\"./run\"]\ntimeout = \"1m 30s\"\n[settings]\nmax_processing_time = \"2m\"\n\
             max_retry_interval = \"-5s\"\nretention = \"7days\"\nschedule_interval = \"250ms\"\n",
        );
        let spec = load_file(&f).unwrap();
        assert_eq!(spec.timeout, Duration::from_secs(90));
        let settings = &spec.settings;
        assert_eq!(
            (settings.max_processing_time, settings.max_retry_interval, settings.retention, settings.schedule_interval),
            (Some(120), Some(-5), Some(604_800), Some(0.25))
        );
        let f = write(&tmp, "numbers", "command = [\"./run\"]\ntimeout = 30\n[settings]\nmax_processing_time = 60\n");
        let spec = load_file(&f).unwrap();
        assert_eq!((spec.timeout, spec.settings.max_processing_time), (Duration::from_secs(30), Some(60)));
        assert_eq!(duration_secs("1.5"), Ok(1.5));
        // no timeout: the default bounds each call (a heartbeat-extended lease alone would not)
        let f = write(&tmp, "none", "command = [\"./run\"]\n");
        let spec = load_file(&f).unwrap();
        assert_eq!((spec.timeout, spec.call_timeout()), (TIMEOUT_DEFAULT, Some(TIMEOUT_DEFAULT)));
        let _ = std::fs::remove_dir_all(tmp);
    }

    #[test]
    fn warm_mode_is_read() {
        let tmp = std::env::temp_dir().join(format!("af-reg-{}", uuid::Uuid::new_v4().simple()));
        let f = write(
            &tmp,
            "w",
            "command = [\"./run\"]\nmode = \"warm\"\ninstances = 3\nconcurrency = 20\nmax_calls_per_instance = 50\ntimeout = 2\n",
        );
        let spec = load_file(&f).unwrap();
        match &spec.kind {
            FunctionKind::Exec { warm, .. } => {
                assert_eq!(
                    warm,
                    &Some(Warm { instances: 3, concurrency: 20, send_ahead: 0, max_calls_per_instance: Some(50) })
                )
            }
            other => panic!("{other:?}"),
        }
        // the timeout runs from when an instance receives the call, not around the wait for one
        assert_eq!(spec.timeout, Duration::from_secs(2));
        assert_eq!(spec.call_timeout(), None);
        let f = write(&tmp, "d", "command = [\"./run\"]\nmode = \"warm\"\n");
        match load_file(&f).unwrap().kind {
            FunctionKind::Exec { warm, .. } => {
                assert_eq!(
                    warm,
                    Some(Warm {
                        instances: 1,
                        concurrency: 1,
                        send_ahead: SEND_AHEAD_DEFAULT,
                        max_calls_per_instance: None
                    })
                )
            }
            other => panic!("{other:?}"),
        }
        let _ = std::fs::remove_dir_all(tmp);
    }

    #[test]
    fn bad_files_are_refused_naming_the_file_and_field() {
        let tmp = std::env::temp_dir().join(format!("af-reg-{}", uuid::Uuid::new_v4().simple()));
        let cases = [
            ("a", "command = [\"./run\"]\nurl = \"http://x\"\n", "command"),
            ("b", "timeout = 3\n", "command"),
            ("c", "command = [\"./missing\"]\n", "command"),
            ("d", "command = [\"./run\"]\ntimeout = -1\n", "timeout"),
            ("e", "command = [\"./run\"]\ntype = \"Bad-Type\"\n", "type"),
            ("f", "command = [\"./run\"]\ncolour = \"red\"\n", "colour"),
            ("g", "command = [\"./run\"]\n[settings]\nmax_retries = 3\n", "max_retries"),
            ("h", "url = \"ftp://x\"\n", "url"),
            ("i", "url = \"http://127.0.0.1:1/\"\nsecret_env = \"AF_TEST_UNSET_SECRET\"\n", "secret_env"),
            ("j", "command = [\"./run\"\n", "function.toml line 2"),
            (
                "k",
                "command = [\"./run\"]\n[settings]\nmax_retry_num = \"three\"\n",
                "settings.max_retry_num: invalid type",
            ),
            ("l", "command = [\"./run\"]\ntimeout = \"soon\"\n", "timeout: \"soon\" is not a duration"),
            ("l2", "command = [\"./run\"]\ntimeout = true\n", "timeout: invalid type"),
            ("l3", "command = [\"./run\"]\ntimeout = \"0s\"\n", "timeout: must be more than zero"),
            (
                "l4",
                "command = [\"./run\"]\n[settings]\nmax_processing_time = \"1.5s\"\n",
                "settings.max_processing_time",
            ),
            ("l5", "command = [\"./run\"]\n[settings]\nretention = \"a week\"\n", "settings.retention: \"a week\""),
            ("m", "command = [\"./run\"]\n[settings]\nconcurrency = 1.5\n", "settings.concurrency"),
            ("n1", "command = [\"./run\"]\nmode = \"hot\"\n", "mode"),
            ("n2", "command = [\"./run\"]\nmode = \"warm\"\ninstances = 0\n", "instances"),
            ("n3", "command = [\"./run\"]\ninstances = 2\n", "instances"),
            ("n4", "command = [\"./run\"]\nmode = \"warm\"\nmax_calls_per_instance = 0\n", "max_calls_per_instance"),
            ("n5", "command = [\"./run\"]\nmode = \"warm\"\nconcurrency = 0\n", "concurrency"),
            ("n6", "command = [\"./run\"]\nconcurrency = 4\n", "concurrency"),
            ("n7", "command = [\"./run\"]\nmode = \"warm\"\nsend_ahead = -1\n", "send_ahead"),
            ("n8", "command = [\"./run\"]\nmode = \"warm\"\nsend_ahead = 1001\n", "send_ahead"),
            ("n9", "command = [\"./run\"]\nmode = \"warm\"\nconcurrency = 2\nsend_ahead = 4\n", "send_ahead"),
            ("n10", "command = [\"./run\"]\nsend_ahead = 4\n", "send_ahead"),
            ("n5", "url = \"http://127.0.0.1:1/\"\nmode = \"warm\"\n", "mode"),
        ];
        for (name, toml, field) in cases {
            let f = write(&tmp, name, toml);
            let err = load_file(&f).expect_err(toml).to_string();
            assert!(err.contains(&f.display().to_string()), "{err}");
            assert!(err.contains(field), "{toml}: {err}");
            assert!(!err.contains("configuration: configuration"), "{err}");
        }
        let _ = std::fs::remove_dir_all(tmp);
    }
}
