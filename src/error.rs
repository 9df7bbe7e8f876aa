//! The crate's error type: one enum for the whole library, with the asyncflow SQLSTATE class
//! (`AFnnn`, raised by the SQL API) mapped to variants, so callers match on meaning, not text.
//!
//! Messages of `AF` errors are written by asyncflow itself and safe to show to a client; any other
//! database error is [`Error::Database`] and should be logged, not echoed.
//!
//! A message that repeats what the client sent repeats at most [`ECHO_MAX_CHARS`] of it
//! ([`echo`]), so a 1 MB name does not come back as a 1 MB error. Messages written elsewhere
//! (PostgreSQL's own, serde's) are cut by [`shorten`], the rule `asyncflow.shorten` applies to
//! every message the SQL API raises.
//!
//! A request to an `asyncflow serve` that got no usable answer is a [`TransportError`], which
//! says how far the request got and so whether the server may have acted on it.

use tokio_postgres::error::SqlState;

/// Result alias used across the crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong in asyncflow.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// AF001: the task type is not registered.
    #[error("{0}")]
    UnknownTaskType(String),
    /// AF002: a report carried a fencing token that no longer matches the task.
    #[error("{0}")]
    StaleFence(String),
    /// AF003: a task type name does not match `^[a-z][a-z0-9_]{0,39}$`.
    #[error("{0}")]
    InvalidTypeName(String),
    /// AF004: priority outside 0..=31,104,000.
    #[error("{0}")]
    PriorityOutOfRange(String),
    /// AF005: context (or result) larger than the configured limit.
    #[error("{0}")]
    ContextTooLarge(String),
    /// AF006 (and other bad input): the shape, type or value of an argument is wrong.
    #[error("{0}")]
    InvalidArgument(String),
    /// AF007: no task with that id.
    #[error("{0}")]
    UnknownTask(String),
    /// AF010: a pipeline definition is invalid (the message names the node or edge).
    #[error("{0}")]
    InvalidPipeline(String),
    /// AF011: no such pipeline (or version, or no active version).
    #[error("{0}")]
    UnknownPipeline(String),
    /// AF012: no such run, or no such node in it.
    #[error("{0}")]
    UnknownRun(String),
    /// AF013: the run or node is not in a state that allows the operation.
    #[error("{0}")]
    WrongState(String),
    /// AF014: no schedule with that name.
    #[error("{0}")]
    UnknownSchedule(String),
    /// Another database error (connection, SQL, constraint). Not for clients' eyes.
    #[error("database error: {}", db_text(.0))]
    Database(#[from] tokio_postgres::Error),
    /// No connection could be had from the pool.
    #[error("connection pool: {}", with_causes(.0))]
    Pool(#[from] deadpool_postgres::PoolError),
    /// Migrations failed or the database is ahead of this build.
    #[error("migration: {0}")]
    Migration(String),
    /// The embedded PostgreSQL could not be found, initialised or started.
    #[error("embedded PostgreSQL: {0}")]
    Embedded(String),
    /// Bad configuration (flags, environment, files).
    #[error("configuration: {0}")]
    Config(String),
    /// The database answered something this build does not understand (schema drift).
    #[error("unexpected answer from the database: {0}")]
    Unexpected(String),
    /// Input/output outside the database.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// A request to a server got no usable answer (see [`TransportError::may_have_applied`]).
    #[error("{0}")]
    Transport(#[from] TransportError),
}

/// The one two-way table of the errors a server answers with a code of their own: variant,
/// HTTP status, code. The server writes an error as its (status, code) ([`Error::wire`]), and a
/// client reads the code back into the same variant ([`Error::from_wire`]).
macro_rules! wire_codes {
    ($($variant:ident => ($status:literal, $code:literal),)*) => {
        impl Error {
            /// The HTTP status and stable code a server answers this error with; None for the
            /// errors that are the server's own trouble (answered 500 or 503, see `http::error`).
            pub fn wire(&self) -> Option<(u16, &'static str)> {
                match self {
                    $(Error::$variant(_) => Some(($status, $code)),)*
                    _ => None,
                }
            }

            /// The error a server's answer with this status and code means, with `message`;
            /// None for a pair the table does not hold.
            pub fn from_wire(status: u16, code: &str, message: String) -> Option<Error> {
                match (status, code) {
                    $(($status, $code) => Some(Error::$variant(message)),)*
                    _ => None,
                }
            }
        }
    };
}

wire_codes! {
    UnknownTaskType => (404, "unknown_task_type"),
    UnknownTask => (404, "unknown_task"),
    StaleFence => (409, "stale_fencing_token"),
    InvalidTypeName => (400, "invalid_type_name"),
    PriorityOutOfRange => (400, "priority_out_of_range"),
    ContextTooLarge => (413, "context_too_large"),
    InvalidArgument => (400, "invalid_argument"),
    InvalidPipeline => (400, "invalid_pipeline"),
    UnknownPipeline => (404, "unknown_pipeline"),
    UnknownRun => (404, "unknown_run"),
    WrongState => (409, "wrong_state"),
    UnknownSchedule => (404, "unknown_schedule"),
}

/// How far a request to a server got before it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// No connection could be made: the request never reached the server.
    NotSent,
    /// Sent, but no whole answer came back (the connection was lost, the time ran out).
    NoAnswer,
    /// Answered with this 5xx status, by the server or by a proxy in front of it.
    Status(u16),
    /// Answered with success, in a body this build cannot read (or that does not fit the request).
    Unreadable,
}

/// A request to a server that got no usable answer: how far it got, which request, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{request}: {detail}")]
pub struct TransportError {
    /// How far the request got.
    pub kind: Transport,
    /// The request, `METHOD url`.
    pub request: String,
    /// What went wrong, with its causes.
    pub detail: String,
}

impl TransportError {
    /// A failure of `request` (`METHOD url`) that got as far as `kind`.
    pub fn new(kind: Transport, request: impl Into<String>, detail: impl Into<String>) -> Self {
        TransportError { kind, request: request.into(), detail: detail.into() }
    }

    /// Whether the server may have acted on the request: anything but a request that never left
    /// (a 5xx may come from a proxy after the server applied it; an unreadable success was
    /// applied). A caller that cannot tell what a request it repeats did (a hold whose answer
    /// was lost may have claimed tasks) must look before going on.
    pub fn may_have_applied(&self) -> bool {
        self.kind != Transport::NotSent
    }
}

/// The most characters of a client's value an error message repeats.
pub const ECHO_MAX_CHARS: usize = 100;

/// A client's value as an error message shows it: quoted, and cut after [`ECHO_MAX_CHARS`]
/// characters with its full length said (`"aaaa…"… (1048576 characters)`).
pub fn echo(value: &str) -> String {
    match value.char_indices().nth(ECHO_MAX_CHARS) {
        None => format!("{value:?}"),
        Some((end, _)) => format!("{:?}… ({} characters)", &value[..end], value.chars().count()),
    }
}

/// The longest message [`shorten`] leaves whole.
pub const MESSAGE_MAX_CHARS: usize = 400;

/// A message of more than [`MESSAGE_MAX_CHARS`] characters cut in the middle, where a value it
/// repeats usually is: its first 200 and last 150 characters (the explanation that follows the
/// value) around `…[N characters cut]…`. The same rule as the SQL function `asyncflow.shorten`.
pub fn shorten(message: &str) -> String {
    let total = message.chars().count();
    if total <= MESSAGE_MAX_CHARS {
        return message.to_string();
    }
    let head: String = message.chars().take(200).collect();
    let tail: String = message.chars().skip(total - 150).collect();
    format!("{head}…[{} characters cut]…{tail}", total - 350)
}

/// The server's message and SQLSTATE when there is one ("db error" alone says nothing).
fn db_text(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => with_causes(e),
    }
}

/// The first error of type `T` in `e`'s chain of sources, `e` included: what a library wrapped
/// (the callback resolver's refusal inside reqwest's error, the body deadline inside axum's).
pub fn find_cause<'a, T: std::error::Error + 'static>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a T> {
    std::iter::successors(Some(e), |e| e.source()).find_map(|e| e.downcast_ref::<T>())
}

/// An error followed by its causes: "error connecting to server: Connection refused (os error 111)".
pub fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

impl Error {
    /// A configuration error with `hint` after its message, in parentheses (other errors as they
    /// are): one "configuration:" prefix, not one per layer that adds something.
    pub fn with_hint(self, hint: &str) -> Error {
        match self {
            Error::Config(message) => Error::Config(format!("{message} ({hint})")),
            other => other,
        }
    }

    /// Maps a database error: asyncflow's own SQLSTATE codes become their variants.
    pub fn from_db(err: tokio_postgres::Error) -> Self {
        let Some(db) = err.as_db_error() else {
            return Error::Database(err);
        };
        // PostgreSQL's own messages repeat the input they could not read, in full
        let message = shorten(db.message());
        match db.code().code() {
            "AF001" => Error::UnknownTaskType(message),
            "AF002" => Error::StaleFence(message),
            "AF003" => Error::InvalidTypeName(message),
            "AF004" => Error::PriorityOutOfRange(message),
            "AF005" => Error::ContextTooLarge(message),
            "AF006" => Error::InvalidArgument(message),
            "AF007" => Error::UnknownTask(message),
            "AF010" => Error::InvalidPipeline(message),
            "AF011" => Error::UnknownPipeline(message),
            "AF012" => Error::UnknownRun(message),
            "AF013" => Error::WrongState(message),
            "AF014" => Error::UnknownSchedule(message),
            _ if *db.code() == SqlState::INVALID_TEXT_REPRESENTATION => Error::InvalidArgument(message),
            // a NUL character (U+0000), which PostgreSQL text and JSON strings cannot hold: the
            // client's input, never the server's trouble
            _ if *db.code() == SqlState::UNTRANSLATABLE_CHARACTER
                || *db.code() == SqlState::CHARACTER_NOT_IN_REPERTOIRE =>
            {
                Error::InvalidArgument(format!(
                    "{message}: text and JSON strings may not contain the NUL character (\\u0000)"
                ))
            }
            _ => Error::Database(err),
        }
    }

    /// Whether trying the same operation again may succeed (transient infrastructure trouble),
    /// as opposed to input that will be refused every time.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Database(e) => e
                .code()
                .map(|c| {
                    *c == SqlState::T_R_SERIALIZATION_FAILURE
                        || *c == SqlState::T_R_DEADLOCK_DETECTED
                        || *c == SqlState::LOCK_NOT_AVAILABLE
                        || *c == SqlState::ADMIN_SHUTDOWN
                })
                .unwrap_or(true),
            Error::Pool(_) | Error::Transport(_) => true,
            _ => false,
        }
    }

    /// Whether the error is the client's fault (bad input), i.e. an HTTP 4xx.
    pub fn is_client_error(&self) -> bool {
        matches!(
            self,
            Error::UnknownTaskType(_)
                | Error::StaleFence(_)
                | Error::InvalidTypeName(_)
                | Error::PriorityOutOfRange(_)
                | Error::ContextTooLarge(_)
                | Error::InvalidArgument(_)
                | Error::UnknownTask(_)
                | Error::InvalidPipeline(_)
                | Error::UnknownPipeline(_)
                | Error::UnknownRun(_)
                | Error::WrongState(_)
                | Error::UnknownSchedule(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoed_values_and_long_messages_are_cut_with_a_marker() {
        assert_eq!(echo("video"), r#""video""#);
        let long = "é".repeat(1_000_000);
        let shown = echo(&long);
        assert!(shown.starts_with(&format!("{:?}", "é".repeat(100))), "{shown}");
        assert!(shown.ends_with("… (1000000 characters)"), "{shown}");
        assert_eq!(echo(&"a".repeat(100)), format!("{:?}", "a".repeat(100)), "100 characters are shown whole");

        let short = "x".repeat(MESSAGE_MAX_CHARS);
        assert_eq!(shorten(&short), short);
        let message = format!("unknown task type '{}': register it first", "b".repeat(1_000_000));
        let cut = shorten(&message);
        let marker = format!("…[{} characters cut]…", message.len() - 350);
        assert_eq!(cut.chars().count(), 350 + marker.chars().count());
        assert!(cut.starts_with("unknown task type 'bbb") && cut.ends_with("bbb': register it first"), "{cut}");
        assert!(cut.contains(&marker), "{cut}");
    }
}
