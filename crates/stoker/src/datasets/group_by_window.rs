//! `group_by_window(key_func, reduce_func, window_size, window_size_func)`: elements gathered
//! into windows by key (tf.data's `Dataset.group_by_window`): when a key's window is full,
//! `reduce_func(key, window)` makes a dataset whose elements are handed out; when the input
//! ends, the windows left are reduced in ascending key order, as tf.data does. The functions
//! are the caller's code (Python, through [`Grouper`]).
//!
//! Its resume state is the number of elements handed out: a restore runs the pass again from
//! its start (the windows being filled hold elements that have no cheaper address), through
//! the functions, up to there.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Debug;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, Schema};
use stoker_core::exec::{skipped_by_unsaved, BoxIter, ElementIter, State};
use stoker_core::stats::{Metered, WaitMeter};
use stoker_core::{Error, ErrorPolicy, Result, StageStats, StatsRegistry};

use super::common::{not_loadable, pass_over};
use super::elements::Elements;
use crate::build::BuildCtx;
use crate::plan::{iterate_at, DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};

/// The key, window size and reduce functions.
pub trait Grouper: Send + Sync + Debug {
    /// The key of `element`, input element `index` of the pass; `None` where the function
    /// failed on it and `policy` skips it (counted in `stats` with the reason).
    fn key(
        &self,
        element: &Element,
        index: u64,
        policy: ErrorPolicy,
        stats: &StageStats,
    ) -> Result<Option<i64>>;
    fn window_size(&self, key: i64, stats: &StageStats) -> Result<usize>;
    /// The dataset a full (or last) window of `key` becomes; `window` hands out the window's
    /// elements.
    fn reduce(&self, key: i64, window: Plan, stats: &StageStats) -> Result<Plan>;
    fn name(&self) -> String;
}

#[derive(Clone, Debug)]
pub struct GroupByWindow {
    pub input: Plan,
    pub grouper: Arc<dyn Grouper>,
}

/// Never read: the functions cannot be saved in a spec.
#[derive(Serialize, Deserialize)]
pub struct Spec {}

impl DatasetOp for GroupByWindow {
    const KIND: &'static str = "group_by_window";
    type Spec = Spec;

    one_input!();

    fn schema(&self) -> Result<Schema> {
        Ok(Schema::dynamic())
    }

    fn label(&self) -> String {
        format!("group_by_window({})", self.grouper.name())
    }

    fn cardinality(&self) -> Cardinality {
        if self.input.step().cardinality() == Cardinality::Infinite {
            Cardinality::Infinite
        } else {
            Cardinality::Unknown
        }
    }

    fn randomness(&self) -> Randomness {
        Randomness::External
    }

    fn iterate(
        &self,
        _: &Plan,
        ctx: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        let done = at.map(|s| s.int(Self::KIND, 0)).transpose()?.unwrap_or(0);
        let input = WaitMeter::wrap(iterate_at(&self.input, ctx, None)?, Arc::clone(&stats));
        let mut it = GroupIter {
            input,
            grouper: Arc::clone(&self.grouper),
            stats: Arc::clone(&stats),
            schema: self.input.schema().clone(),
            // The datasets reduced from windows get stats of their own, so that the
            // pipeline's list stays short; their losses are counted here too.
            child: BuildCtx {
                stats: StatsRegistry::under(&stats),
                ..ctx.clone()
            },
            policy: ctx.options.on_bad_record,
            groups: BTreeMap::new(),
            full: VecDeque::new(),
            current: None,
            ended: false,
            handed_out: 0,
            taken: 0,
            skipped: 0,
            reduced_skipped: 0,
        };
        pass_over(&mut it, done, Self::KIND, "the pass", "")?;
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<Spec>> {
        Err(Error::Spec(format!(
            "group_by_window with the Python function '{}' cannot be saved in a spec",
            self.grouper.name()
        )))
    }

    fn from_spec(_: Spec, _: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        Err(not_loadable("its functions are Python code"))
    }
}

struct GroupIter {
    input: BoxIter,
    grouper: Arc<dyn Grouper>,
    stats: Arc<StageStats>,
    child: BuildCtx,
    /// The input's schema: the windows'.
    schema: Schema,
    policy: ErrorPolicy,
    /// The windows being filled, by key.
    groups: BTreeMap<i64, Vec<Element>>,
    /// Windows ready to reduce, in order.
    full: VecDeque<(i64, Vec<Element>)>,
    /// The reduced dataset being handed out.
    current: Option<BoxIter>,
    ended: bool,
    handed_out: u64,
    /// Input elements taken so far.
    taken: u64,
    /// Input elements skipped because the key function failed on them (a restore runs the
    /// pass again, which counts them again up to where it stood).
    skipped: u64,
    /// Bad records skipped by the reduced datasets that ended (counted again alike).
    reduced_skipped: u64,
}

impl GroupIter {
    /// Reads input until a window is full (or, at the end, moves every window left to
    /// `full`, in key order). False when nothing is left.
    fn fill(&mut self) -> Result<bool> {
        while self.full.is_empty() {
            if self.ended {
                let rest = std::mem::take(&mut self.groups);
                self.full
                    .extend(rest.into_iter().filter(|(_, w)| !w.is_empty()));
                return Ok(!self.full.is_empty());
            }
            let Some(e) = self.input.next()? else {
                self.ended = true;
                continue;
            };
            self.taken += 1;
            let key = self
                .grouper
                .key(&e, self.taken - 1, self.policy, &self.stats)?;
            let Some(key) = key else {
                self.skipped += 1;
                continue;
            };
            let size = self.grouper.window_size(key, &self.stats)?;
            if size == 0 {
                return Err(Error::invalid(
                    GroupByWindow::KIND,
                    format!("the window size of key {key} must be at least 1"),
                ));
            }
            let group = self.groups.entry(key).or_default();
            group.push(e);
            if group.len() >= size {
                let window = std::mem::take(group);
                self.full.push_back((key, window));
            }
        }
        Ok(true)
    }
}

impl ElementIter for GroupIter {
    fn next(&mut self) -> Result<Option<Element>> {
        loop {
            if let Some(current) = self.current.as_mut() {
                if let Some(e) = current.next()? {
                    self.handed_out += 1;
                    return Ok(Some(e));
                }
                if let Some(ended) = self.current.take() {
                    self.reduced_skipped += skipped_by_unsaved(&*ended);
                }
            }
            if !self.fill()? {
                return Ok(None);
            }
            let Some((key, rows)) = self.full.pop_front() else {
                return Ok(None);
            };
            let window = Plan::new(Elements {
                elements: Arc::new(rows),
                schema: self.schema.clone(),
            })?;
            let plan = self.grouper.reduce(key, window, &self.stats)?;
            self.current = Some(iterate_at(&plan, &self.child, None)?);
        }
    }

    /// The count, with the input's state beside it for the pipeline check (a restore starts
    /// the input afresh).
    fn state(&self) -> Result<State> {
        let reduced = self.reduced_skipped
            + self
                .current
                .as_ref()
                .map_or(0, |it| skipped_by_unsaved(&**it));
        Ok(State::new(vec![self.handed_out], vec![self.input.state()?])
            .with_skipped(self.skipped + reduced))
    }
}
