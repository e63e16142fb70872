//! Rebuilding a stage's buffer on restore by running its input again from the start of the
//! pass (see [`state`](crate::exec::state)).

use crate::element::Element;
use crate::error::Result;
use crate::exec::state;
use crate::exec::BoxIter;

/// Runs `input` (fresh, at the start of its pass) through its first `count` elements, keeping
/// those at `wanted` positions (in the order of `wanted`); `input` is then positioned right
/// after element `count - 1`. Ends early when the input does.
pub fn replay(input: &mut BoxIter, count: u64, wanted: &[u64]) -> Result<Vec<Element>> {
    let mut order: Vec<(u64, usize)> = wanted.iter().enumerate().map(|(k, &p)| (p, k)).collect();
    order.sort_unstable();
    let mut found: Vec<Option<Element>> = vec![None; wanted.len()];
    let mut next = order.iter().peekable();
    for position in 0..count {
        let Some(e) = input.next()? else {
            break;
        };
        while let Some(&&(p, k)) = next.peek() {
            if p != position {
                break;
            }
            found[k] = Some(e.clone());
            next.next();
        }
    }
    found
        .into_iter()
        .map(|e| e.ok_or_else(|| state::damaged("a position past the end of the input")))
        .collect()
}
