//! Sets of time intervals: merged, sorted, and queried by binary search, so that a trace with
//! millions of kernels is measured per step without a pass over all of them per step.

/// Disjoint, sorted intervals (start, end).
#[derive(Clone, Debug, Default)]
pub struct Union {
    spans: Vec<(f64, f64)>,
}

impl Union {
    /// The union of `intervals` (in any order).
    pub fn new(mut intervals: Vec<(f64, f64)>) -> Union {
        intervals.retain(|(a, b)| b > a);
        intervals.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        // Merged in place: `kept` spans are done, the rest is still to merge.
        let mut kept = 0;
        for i in 0..intervals.len() {
            let (a, b) = intervals[i];
            if kept > 0 && a <= intervals[kept - 1].1 {
                intervals[kept - 1].1 = intervals[kept - 1].1.max(b);
            } else {
                intervals[kept] = (a, b);
                kept += 1;
            }
        }
        intervals.truncate(kept);
        intervals.shrink_to_fit();
        Union { spans: intervals }
    }

    /// The union of intervals pushed one at a time: merged as they come while they come in
    /// order of their start (millions of host spans then take the memory of their union, not
    /// their own), gathered and merged at the end otherwise.
    pub fn builder() -> UnionBuilder {
        UnionBuilder::default()
    }

    /// The intervals that overlap [a, b), clipped to it.
    pub fn within(&self, a: f64, b: f64) -> impl Iterator<Item = (f64, f64)> + '_ {
        let first = self.spans.partition_point(|s| s.1 <= a);
        self.spans[first..]
            .iter()
            .take_while(move |s| s.0 < b)
            .map(move |s| (s.0.max(a), s.1.min(b)))
    }

    /// Time covered within [a, b).
    pub fn covered(&self, a: f64, b: f64) -> f64 {
        // A fold from +0.0: an empty `sum` of floats is -0.0, which prints as "-0.0".
        self.within(a, b).fold(0.0, |acc, (x, y)| acc + (y - x))
    }

    /// The uncovered parts of [a, b).
    pub fn gaps(&self, a: f64, b: f64) -> Vec<(f64, f64)> {
        let mut out = Vec::new();
        let mut at = a;
        for (x, y) in self.within(a, b) {
            if x > at {
                out.push((at, x));
            }
            at = at.max(y);
        }
        if b > at {
            out.push((at, b));
        }
        out
    }

    /// The uncovered stretch that ends at `t`, from the end of the interval before it (from
    /// `floor` if none is after `floor`); `None` where `t` is covered from before it.
    pub fn gap_before(&self, t: f64, floor: f64) -> Option<(f64, f64)> {
        let i = self.spans.partition_point(|s| s.0 < t);
        let prev = i.checked_sub(1).map(|j| self.spans[j]);
        match prev {
            Some((_, end)) if end >= t => None,
            Some((_, end)) if end > floor => Some((end, t)),
            _ => (floor < t).then_some((floor, t)),
        }
    }

    pub fn total(&self) -> f64 {
        self.spans.iter().fold(0.0, |acc, (a, b)| acc + (b - a))
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }
}

/// See [`Union::builder`].
#[derive(Debug, Default)]
pub struct UnionBuilder {
    spans: Vec<(f64, f64)>,
    /// Some interval came before the start of the one before it.
    unordered: bool,
}

impl UnionBuilder {
    pub fn push(&mut self, a: f64, b: f64) {
        if b <= a || a.is_nan() || b.is_nan() {
            return;
        }
        if !self.unordered {
            if let Some(last) = self.spans.last_mut() {
                if a < last.0 {
                    self.unordered = true;
                } else if a <= last.1 {
                    last.1 = last.1.max(b);
                    return;
                }
            }
        }
        self.spans.push((a, b));
    }

    pub fn finish(mut self) -> Union {
        if self.unordered {
            Union::new(self.spans)
        } else {
            self.spans.shrink_to_fit();
            Union { spans: self.spans }
        }
    }
}

/// Something that runs over a time interval.
pub trait Timed {
    fn start(&self) -> f64;
    fn end(&self) -> f64;
}

impl<T: Timed> Timed for &T {
    fn start(&self) -> f64 {
        (*self).start()
    }
    fn end(&self) -> f64 {
        (*self).end()
    }
}

/// The items of a sequence sorted by start that overlap each of a series of windows (the
/// steps): one pass over the items for all the windows together, holding only the items that
/// a window still to come may overlap, not a pass per window.
pub struct Sweep<I: Iterator> {
    items: std::iter::Peekable<I>,
    /// Items that started before the latest window's end and end after `keep_after`, in the
    /// sequence's order.
    running: Vec<I::Item>,
}

impl<I: Iterator> Sweep<I>
where
    I::Item: Timed,
{
    pub fn new(items: I) -> Sweep<I> {
        Sweep {
            items: items.peekable(),
            running: Vec::new(),
        }
    }

    /// The items with `end > a` and `start < b`, in the sequence's order. `keep_after`: no
    /// window after this one starts before it (the smallest start of this window and those to
    /// come): items that end by then are let go. (Steps come in order of their start, then it
    /// is `a`; but steps measured on the device may not.)
    pub fn window(
        &mut self,
        a: f64,
        b: f64,
        keep_after: f64,
    ) -> impl Iterator<Item = &I::Item> + '_ {
        while let Some(item) = self.items.next_if(|x| x.start() < b) {
            self.running.push(item);
        }
        self.running.retain(|x| x.end() > keep_after);
        self.running
            .iter()
            .filter(move |x| x.end() > a && x.start() < b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Timed for (f64, f64) {
        fn start(&self) -> f64 {
            self.0
        }
        fn end(&self) -> f64 {
            self.1
        }
    }

    #[test]
    fn a_sweep_finds_what_overlaps_each_window_as_a_scan_does() {
        let mut rng = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % n) as f64
        };
        let mut items: Vec<(f64, f64)> = (0..500)
            .map(|_| {
                let a = next(1000);
                // Mostly short, some long, some empty.
                let len = if next(10) == 0.0 { next(400) } else { next(8) };
                (a, a + len)
            })
            .collect();
        items.sort_by(|p, q| p.0.total_cmp(&q.0));
        // Windows in order of their start, some overlapping, some nested, some empty; then
        // the same windows, a few out of order.
        let mut windows: Vec<(f64, f64)> = (0..200)
            .map(|_| {
                let a = next(1100);
                (a, a + next(30))
            })
            .collect();
        windows.sort_by(|p, q| p.0.total_cmp(&q.0));
        let mut shuffled = windows.clone();
        for i in (0..shuffled.len()).step_by(7) {
            let j = (i + next(5) as usize).min(shuffled.len() - 1);
            shuffled.swap(i, j);
        }
        for windows in [windows, shuffled] {
            let mut keep_after: Vec<f64> = windows.iter().map(|w| w.0).collect();
            for i in (0..keep_after.len().saturating_sub(1)).rev() {
                keep_after[i] = keep_after[i].min(keep_after[i + 1]);
            }
            let mut sweep = Sweep::new(items.iter());
            for (&(a, b), &k) in windows.iter().zip(&keep_after) {
                let got: Vec<(f64, f64)> = sweep.window(a, b, k).map(|x| **x).collect();
                let want: Vec<(f64, f64)> = (items.iter())
                    .filter(|x| x.1 > a && x.0 < b)
                    .copied()
                    .collect();
                assert_eq!(got, want, "window [{a}, {b})");
            }
        }
    }

    #[test]
    fn union_coverage_and_gaps() {
        let u = Union::new(vec![(5.0, 7.0), (0.0, 2.0), (1.0, 3.0), (9.0, 9.0)]);
        assert_eq!(u.total(), 5.0);
        assert_eq!(u.covered(1.0, 6.0), 3.0);
        assert_eq!(u.gaps(0.0, 10.0), vec![(3.0, 5.0), (7.0, 10.0)]);
        assert_eq!(u.gaps(2.5, 2.8), Vec::<(f64, f64)>::new());
        assert_eq!(Union::new(vec![]).gaps(1.0, 2.0), vec![(1.0, 2.0)]);
    }

    #[test]
    fn built_one_at_a_time_in_or_out_of_order() {
        let spans = [
            (0.0, 2.0),
            (1.0, 3.0),
            (3.0, 4.0),
            (5.0, 7.0),
            (6.0, 6.5),
            (9.0, 9.0),
        ];
        let mut sorted = Union::builder();
        for (a, b) in spans {
            sorted.push(a, b);
        }
        let sorted = sorted.finish();
        assert_eq!(sorted.spans, vec![(0.0, 4.0), (5.0, 7.0)]);
        let mut mixed = Union::builder();
        for (a, b) in spans.iter().rev() {
            mixed.push(*a, *b);
        }
        mixed.push(f64::NAN, 1.0);
        assert_eq!(mixed.finish().spans, sorted.spans);
        assert_eq!(Union::new(spans.to_vec()).spans, sorted.spans);
    }

    #[test]
    fn the_gap_before_a_time() {
        let u = Union::new(vec![(0.0, 2.0), (5.0, 7.0), (7.0, 8.0)]);
        assert_eq!(u.gap_before(5.0, 1.0), Some((2.0, 5.0)));
        assert_eq!(u.gap_before(5.0, 3.0), Some((3.0, 5.0))); // idle since before the floor
        assert_eq!(u.gap_before(7.0, 0.0), None); // covered right up to it
        assert_eq!(u.gap_before(6.0, 0.0), None);
        assert_eq!(u.gap_before(0.0, -1.0), Some((-1.0, 0.0)));
    }
}
