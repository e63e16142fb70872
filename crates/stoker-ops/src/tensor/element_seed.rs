//! `element_seed(output, seed)`: writes a `[2]` int64 field, a seed for this element's random
//! draws, as TensorFlow's stateless random ops (`tf.random.stateless_uniform(shape, seed)`)
//! take one. Like the native random ops' decisions, it depends only on the seed, the epoch
//! and the element's position: the same on 1 or N threads, on every rank, after a resume, and
//! new every epoch. TensorFlow functions whose random ops stoker seeds read it (see the
//! Python package's `_tf_function`).

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::exec::shuffle::epoch_seed;
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{DType, Result, Seed, Tensor};

use crate::kernels::fields::{put, with_field};
use crate::kernels::spec_json::spec_json;

const OP: &str = "element_seed";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ElementSeed {
    pub output: String,
    #[serde(default, skip_serializing_if = "Seed::is_drawn")]
    pub seed: Seed,
}

impl ElementSeed {
    /// The two numbers of this element's seed.
    pub fn values(&self, ctx: &OpCtx<'_>) -> [i64; 2] {
        let s = ctx.element_seed(self.seed);
        // Two's-complement reinterpretation: TensorFlow reads the seed's bits.
        [s as i64, epoch_seed(s, 1) as i64]
    }
}

impl Op for ElementSeed {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        Fields::Named {
            reads: Vec::new(),
            writes: vec![self.output.clone()],
        }
    }

    fn deterministic(&self) -> bool {
        false
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        Ok(with_field(
            input,
            FieldSpec::fixed(&self.output, DType::I64, &[2]),
        ))
    }

    fn apply(&self, input: Element, ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let seed = Tensor::from_slice(DType::I64, vec![2], &self.values(ctx))?;
        Ok(Some(put(input, &self.output, seed)))
    }

    fn seeds(&self) -> Vec<Seed> {
        vec![self.seed]
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}

#[cfg(test)]
mod tests {
    use stoker_core::element::Names;
    use stoker_core::options::ErrorPolicy;
    use stoker_core::stats::StageStats;

    use super::*;

    fn ctx<'a>(stats: &'a StageStats, element: u64, epoch: u64) -> OpCtx<'a> {
        OpCtx {
            policy: ErrorPolicy::Raise,
            stats,
            element,
            epoch,
            row: None,
            seeds: stoker_core::Seeds::none(),
            skipped: Default::default(),
        }
    }

    #[test]
    fn the_seed_depends_on_the_seed_the_element_and_the_epoch_only() {
        let stats = StageStats::new("t", "t");
        let op = ElementSeed {
            output: "s".into(),
            seed: Seed::given(7),
        };
        let at = |element, epoch| op.values(&ctx(&stats, element, epoch));
        assert_eq!(at(3, 0), at(3, 0));
        assert_ne!(at(3, 0), at(4, 0));
        assert_ne!(at(3, 0), at(3, 1));
        let other = ElementSeed {
            output: "s".into(),
            seed: Seed::given(8),
        };
        assert_ne!(other.values(&ctx(&stats, 3, 0)), at(3, 0));
        let out = op
            .apply(
                Element::new(Names::from(Vec::new()), Vec::new()),
                &ctx(&stats, 3, 0),
            )
            .unwrap()
            .unwrap();
        let t = &out.tensors[out.require(OP, "s").unwrap()];
        assert_eq!(t.shape(), &[2]);
        assert_eq!(t.typed::<i64>().unwrap(), &at(3, 0)[..]);
    }
}
