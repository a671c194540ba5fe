//! How a statement reaches either database: its SQL, with the parameters written the way
//! the store's driver expects (`?N` or `$N`), and the parameters themselves as [`Arg`]s,
//! which each store hands to its driver (`Arg` maps onto both drivers' parameter traits, in
//! the stores). Statements written once for both are spelled with SQLite's `?N`, which
//! [`Statement::written`] turns into PostgreSQL's `$N` with the same numbers; statements that
//! depend on a scope are built a piece at a time (see [`crate::reads`]).

use std::borrow::Cow;

/// How a store writes its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// `?1`, `?2`, …
    Sqlite,
    /// `$1`, `$2`, …
    Postgres,
}

impl Dialect {
    fn param(self, n: usize) -> String {
        match self {
            Dialect::Sqlite => format!("?{n}"),
            Dialect::Postgres => format!("${n}"),
        }
    }

    /// A statement written with `?N` parameters, as this dialect writes it. The shared
    /// statements hold no `?` but their parameters' (no string literal, no JSON operator).
    fn sql(self, text: &str) -> Cow<'_, str> {
        match self {
            Dialect::Sqlite => Cow::Borrowed(text),
            Dialect::Postgres => Cow::Owned(text.replace('?', "$")),
        }
    }
}

/// A parameter of a shared statement, borrowed from what the statement is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arg<'a> {
    Int(i64),
    Text(&'a str),
    /// Text or `NULL`.
    OptText(Option<&'a str>),
}

impl From<i64> for Arg<'_> {
    fn from(v: i64) -> Self {
        Arg::Int(v)
    }
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(v: &'a str) -> Self {
        Arg::Text(v)
    }
}

/// A statement to run: its SQL in a store's dialect, and its parameters.
pub struct Statement<'a> {
    pub sql: Cow<'a, str>,
    pub args: Vec<Arg<'a>>,
    dialect: Dialect,
}

impl<'a> Statement<'a> {
    /// A statement written out with `?N` parameters, as `dialect` spells it.
    pub fn written(dialect: Dialect, sql: &'a str, args: &[Arg<'a>]) -> Statement<'a> {
        Statement { sql: dialect.sql(sql), args: args.to_vec(), dialect }
    }

    /// The start of a statement built a piece at a time, SQL and parameters in step.
    pub(crate) fn build(dialect: Dialect, head: &str) -> Statement<'a> {
        Statement { sql: Cow::Owned(head.to_string()), args: Vec::new(), dialect }
    }

    pub(crate) fn push(&mut self, sql: &str) -> &mut Self {
        self.sql.to_mut().push_str(sql);
        self
    }

    pub(crate) fn arg(&mut self, v: impl Into<Arg<'a>>) -> &mut Self {
        self.args.push(v.into());
        let p = self.dialect.param(self.args.len());
        self.sql.to_mut().push_str(&p);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_statements_keep_their_numbers_in_each_dialect() {
        let sql = "UPDATE feeds SET items = ?2 WHERE id = ?1";
        assert_eq!(Statement::written(Dialect::Sqlite, sql, &[]).sql, sql);
        let pg = Statement::written(Dialect::Postgres, sql, &[Arg::Int(1), Arg::Text("x")]);
        assert_eq!(
            (pg.sql.as_ref(), pg.args),
            ("UPDATE feeds SET items = $2 WHERE id = $1", vec![Arg::Int(1), Arg::Text("x")])
        );
    }
}
