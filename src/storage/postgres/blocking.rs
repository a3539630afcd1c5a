//! The blocking-over-async bridge, in one place: `tokio-postgres`'s client called as a blocking
//! one, so the PostgreSQL code reads like rusqlite's (`c.query(..)?`, `tx.commit()?`).
//!
//! The connection itself runs on the storage's own runtime (see [`super::connect`]), so a call
//! here only waits for its answer: no runtime is needed on the calling thread, and the same
//! storage works on the scheduler's executor, on plain threads and in tests.

use std::future::Future;

use tokio_postgres::ToStatement;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, IsolationLevel, Row, Statement, Transaction};

pub(crate) type PgResult<T> = Result<T, tokio_postgres::Error>;

/// The values of a statement's `$n` placeholders.
pub(crate) type Values<'a> = &'a [&'a (dyn ToSql + Sync)];

/// Waits for a client future.
fn wait<F: Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}

/// The blocking calls of a session ([`Session`]) or of a transaction ([`Tx`]).
pub(crate) trait Sql {
    fn query<T: ?Sized + ToStatement + Sync>(&self, sql: &T, values: Values) -> PgResult<Vec<Row>>;
    fn query_one<T: ?Sized + ToStatement + Sync>(&self, sql: &T, values: Values) -> PgResult<Row>;
    fn query_opt<T: ?Sized + ToStatement + Sync>(
        &self,
        sql: &T,
        values: Values,
    ) -> PgResult<Option<Row>>;
    fn execute<T: ?Sized + ToStatement + Sync>(&self, sql: &T, values: Values) -> PgResult<u64>;
    /// Runs statements without values (`;`-separated), as a simple query.
    fn batch_execute(&self, sql: &str) -> PgResult<()>;
    fn prepare(&self, sql: &str) -> PgResult<Statement>;
}

/// Both implementations call the client's own (inherent) futures and wait for them.
macro_rules! blocking_sql {
    ($t:ty) => {
        impl Sql for $t {
            fn query<T: ?Sized + ToStatement + Sync>(
                &self,
                sql: &T,
                values: Values,
            ) -> PgResult<Vec<Row>> {
                wait(self.0.query(sql, values))
            }
            fn query_one<T: ?Sized + ToStatement + Sync>(
                &self,
                sql: &T,
                values: Values,
            ) -> PgResult<Row> {
                wait(self.0.query_one(sql, values))
            }
            fn query_opt<T: ?Sized + ToStatement + Sync>(
                &self,
                sql: &T,
                values: Values,
            ) -> PgResult<Option<Row>> {
                wait(self.0.query_opt(sql, values))
            }
            fn execute<T: ?Sized + ToStatement + Sync>(
                &self,
                sql: &T,
                values: Values,
            ) -> PgResult<u64> {
                wait(self.0.execute(sql, values))
            }
            fn batch_execute(&self, sql: &str) -> PgResult<()> {
                wait(self.0.batch_execute(sql))
            }
            fn prepare(&self, sql: &str) -> PgResult<Statement> {
                wait(self.0.prepare(sql))
            }
        }
    };
}

/// A session on the server, outside any transaction.
pub(crate) struct Session<'a>(pub(super) &'a mut Client);

/// A transaction; dropped without [`Tx::commit`], it rolls back.
pub(crate) struct Tx<'a>(Transaction<'a>);

blocking_sql!(Session<'_>);
blocking_sql!(Tx<'_>);

impl Session<'_> {
    pub(crate) fn transaction(&mut self) -> PgResult<Tx<'_>> {
        wait(self.0.transaction()).map(Tx)
    }

    /// A read-only transaction that sees one snapshot of the database throughout.
    pub(crate) fn snapshot(&mut self) -> PgResult<Tx<'_>> {
        wait(
            self.0
                .build_transaction()
                .read_only(true)
                .isolation_level(IsolationLevel::RepeatableRead)
                .start(),
        )
        .map(Tx)
    }
}

impl Tx<'_> {
    pub(crate) fn commit(self) -> PgResult<()> {
        wait(self.0.commit())
    }

    pub(crate) fn rollback(self) -> PgResult<()> {
        wait(self.0.rollback())
    }
}
