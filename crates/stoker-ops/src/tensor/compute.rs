//! `compute(output, expr, dtype)`: element-wise arithmetic over an element's numeric fields,
//! as one expression evaluated in one pass, so that a pipeline's math (a score, a mask, a
//! rescaling) runs on the worker threads without Python.
//!
//! The expression is a tree of fields, constants, unary functions, binary operators,
//! comparisons, `where` and casts (the Python side builds it with operators on
//! `stoker.ops.field(...)`). Fields broadcast against each other as NumPy's and TensorFlow's
//! arrays do. Values are computed in `float32` when the output is a float32 (or narrower)
//! type, in `float64` otherwise; each field is converted once, as `tf.cast` would. `tanh` in
//! `float32` is the rational approximation TensorFlow's CPU kernel evaluates (Eigen's), so
//! that results equal TensorFlow's.
//!
//! The output is made in chunks of a few hundred values: every node of the expression runs
//! over a chunk that stays in the L1 cache, in a loop the compiler vectorises, and the chunk
//! is written to the output (a batch row, when the batch offers one) once.

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{DType, Error, Result, Tensor};

use crate::kernels::fields::{build_chunks_into, put, with_field};
use crate::kernels::numeric::{float_to_i32, float_to_i64, float_to_narrow, is_numeric};
use crate::kernels::spec_json::spec_json;

const OP: &str = "compute";

/// Values evaluated together.
const CHUNK: usize = 256;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Compute {
    pub output: String,
    pub expr: Expr,
    #[serde(default = "default_dtype")]
    pub dtype: DType,
}

fn default_dtype() -> DType {
    DType::F32
}

/// A node of an expression.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "e", rename_all = "snake_case")]
pub enum Expr {
    /// A numeric field, optionally viewed with another shape of as many values (`-1` once for
    /// the rest).
    Field {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shape: Option<Vec<i64>>,
    },
    Const {
        value: f64,
    },
    Unary {
        f: Unary,
        x: Box<Expr>,
    },
    Binary {
        f: Binary,
        a: Box<Expr>,
        b: Box<Expr>,
    },
    /// `a` where `cond` is not 0, else `b`.
    Where {
        cond: Box<Expr>,
        a: Box<Expr>,
        b: Box<Expr>,
    },
    /// The value as `dtype` holds it (integers as TensorFlow's `Cast` converts floats: see
    /// `float_to_i32`; bool is `x != 0`), computed on.
    Cast {
        dtype: DType,
        x: Box<Expr>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unary {
    Neg,
    Abs,
    Sign,
    Tanh,
    Exp,
    Log,
    Sqrt,
    Square,
    Floor,
    Ceil,
    /// Half to even, as `tf.round`.
    Round,
    /// 1 where the value is 0, else 0.
    Not,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Binary {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Minimum,
    Maximum,
    Less,
    LessEqual,
    Greater,
    GreaterEqual,
    Equal,
    NotEqual,
    /// 1 where both are not 0.
    And,
    /// 1 where either is not 0.
    Or,
}

/// The float type values are computed in.
trait Real: Copy + Default + PartialOrd + Send + Sync + 'static {
    const ZERO: Self;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    fn unary(f: Unary, x: Self) -> Self;
    fn binary(f: Binary, a: Self, b: Self) -> Self;
    /// Loads `src` (any numeric dtype) as values of this type, each converted once.
    fn load(src: &Tensor, offsets: Offsets<'_>, out: &mut [Self]) -> Result<()>;
}

/// Which values of a field one chunk reads.
#[derive(Clone, Copy)]
enum Offsets<'a> {
    /// Values `start..start + len` (the field has the output's shape).
    Range(usize),
    /// Value 0, for every output value.
    Splat,
    /// The values at these offsets (a broadcast field).
    At(&'a [usize]),
}

macro_rules! real_common {
    ($t:ty) => {
        const ZERO: $t = 0.0;

        fn binary(f: Binary, a: $t, b: $t) -> $t {
            let truth = |c: bool| if c { 1.0 } else { 0.0 };
            match f {
                Binary::Add => a + b,
                Binary::Sub => a - b,
                Binary::Mul => a * b,
                Binary::Div => a / b,
                Binary::Pow => a.powf(b),
                // NaN propagates, as TensorFlow's minimum and maximum.
                Binary::Minimum => {
                    if a.is_nan() || b.is_nan() {
                        <$t>::NAN
                    } else {
                        a.min(b)
                    }
                }
                Binary::Maximum => {
                    if a.is_nan() || b.is_nan() {
                        <$t>::NAN
                    } else {
                        a.max(b)
                    }
                }
                Binary::Less => truth(a < b),
                Binary::LessEqual => truth(a <= b),
                Binary::Greater => truth(a > b),
                Binary::GreaterEqual => truth(a >= b),
                Binary::Equal => truth(a == b),
                Binary::NotEqual => truth(a != b),
                Binary::And => truth(a != 0.0 && b != 0.0),
                Binary::Or => truth(a != 0.0 || b != 0.0),
            }
        }

        fn load(src: &Tensor, offsets: Offsets<'_>, out: &mut [$t]) -> Result<()> {
            macro_rules! conv {
                ($s:ty, $f:expr) => {{
                    let v = src
                        .typed::<$s>()
                        .ok_or_else(|| Error::internal("compute: dtype/size mismatch"))?;
                    let f = $f;
                    match offsets {
                        Offsets::Range(start) => {
                            let n = out.len();
                            for (o, x) in out.iter_mut().zip(&v[start..start + n]) {
                                *o = f(*x);
                            }
                        }
                        Offsets::Splat => out.fill(f(v[0])),
                        Offsets::At(at) => {
                            for (o, &i) in out.iter_mut().zip(at) {
                                *o = f(v[i]);
                            }
                        }
                    }
                }};
            }
            match src.dtype() {
                DType::Bool | DType::U8 => conv!(u8, |x: u8| x as $t),
                DType::I8 => conv!(i8, |x: i8| x as $t),
                DType::I16 => conv!(i16, |x: i16| x as $t),
                DType::U16 => conv!(u16, |x: u16| x as $t),
                DType::I32 => conv!(i32, |x: i32| x as $t),
                DType::I64 => conv!(i64, |x: i64| x as $t),
                DType::F16 => conv!(half::f16, |x: half::f16| x.to_f64() as $t),
                DType::BF16 => conv!(half::bf16, |x: half::bf16| x.to_f64() as $t),
                DType::F32 => conv!(f32, |x: f32| x as $t),
                DType::F64 => conv!(f64, |x: f64| x as $t),
                DType::Bytes => return Err(Error::internal("compute: bytes field")),
            }
            Ok(())
        }
    };
}

/// `sign` as TensorFlow's: -1, 0 or 1 (+0 for -0), and NaN for NaN.
macro_rules! unary_common {
    ($f:expr, $x:expr, $t:ty, $tanh:expr) => {
        match $f {
            Unary::Neg => -$x,
            Unary::Abs => $x.abs(),
            Unary::Sign => {
                if $x > 0.0 {
                    1.0
                } else if $x < 0.0 {
                    -1.0
                } else if $x.is_nan() {
                    $x
                } else {
                    0.0
                }
            }
            Unary::Tanh => $tanh($x),
            Unary::Exp => $x.exp(),
            Unary::Log => $x.ln(),
            Unary::Sqrt => $x.sqrt(),
            Unary::Square => $x * $x,
            Unary::Floor => $x.floor(),
            Unary::Ceil => $x.ceil(),
            Unary::Round => $x.round_ties_even(),
            Unary::Not => {
                if $x == 0.0 {
                    1.0
                } else {
                    0.0
                }
            }
        }
    };
}

impl Real for f32 {
    real_common!(f32);

    fn from_f64(v: f64) -> f32 {
        v as f32
    }

    fn to_f64(self) -> f64 {
        f64::from(self)
    }

    fn unary(f: Unary, x: f32) -> f32 {
        unary_common!(f, x, f32, tanh_f32)
    }
}

impl Real for f64 {
    real_common!(f64);

    fn from_f64(v: f64) -> f64 {
        v
    }

    fn to_f64(self) -> f64 {
        self
    }

    fn unary(f: Unary, x: f64) -> f64 {
        unary_common!(f, x, f64, f64::tanh)
    }
}

/// `tanh` in float32 as TensorFlow's CPU kernel computes it (Eigen's `ptanh_float` without
/// FMA): a [9/8] rational approximation on the input clamped to where it reaches ±1. Equal,
/// bit for bit, to `tf.math.tanh` of TensorFlow 2.21 on the inputs the golden test checks.
fn tanh_f32(x: f32) -> f32 {
    const CLAMP: f32 = 7.907_389_6;
    const ALPHA: [f32; 4] = [
        1.394_553_6e-8,
        2.102_733_6e-5,
        3.520_756_7e-3,
        1.340_216_1e-1,
    ];
    const BETA: [f32; 5] = [
        8.015_777e-7,
        3.326_951_4e-4,
        2.597_254_5e-2,
        4.673_548_3e-1,
        1.0,
    ];
    if x.is_nan() {
        return x;
    }
    let x = x.clamp(-CLAMP, CLAMP);
    let x2 = x * x;
    let x3 = x2 * x;
    // Horner, each step a multiply then an add (no fused multiply-add, as the kernel built
    // without FMA).
    let p = ALPHA[1..].iter().fold(ALPHA[0], |acc, &c| acc * x2 + c);
    let q = BETA[1..].iter().fold(BETA[0], |acc, &c| acc * x2 + c);
    (x3 * p + x) / q
}

/// A value of dtype `dtype` holds: `v` converted as a cast to `dtype` would, as f64.
fn as_dtype(dtype: DType, v: f64) -> f64 {
    match dtype {
        DType::Bool => f64::from(u8::from(v != 0.0)),
        DType::U8 => f64::from(float_to_narrow(v, u8::MIN, u8::MAX)),
        DType::I8 => f64::from(float_to_narrow(v, i8::MIN, i8::MAX)),
        DType::I16 => f64::from(float_to_narrow(v, i16::MIN, i16::MAX)),
        DType::U16 => f64::from(float_to_narrow(v, u16::MIN, u16::MAX)),
        DType::I32 => f64::from(float_to_i32(v)),
        DType::I64 => float_to_i64(v) as f64,
        DType::F16 => f64::from(half::f16::from_f64(v)),
        DType::BF16 => f64::from(half::bf16::from_f64(v)),
        DType::F32 => f64::from(v as f32),
        DType::F64 | DType::Bytes => v,
    }
}

/// One step of the compiled expression, on a stack of chunk buffers.
#[derive(Clone, Copy, Debug)]
enum Step {
    Load(usize),
    Const(f64),
    Unary(Unary),
    Binary(Binary),
    Where,
    Cast(DType),
}

/// The expression in evaluation order, its fields, and the stack depth it needs.
struct Program {
    steps: Vec<Step>,
    /// Distinct fields read, in first-use order, with the shape each is viewed with.
    fields: Vec<(String, Option<Vec<i64>>)>,
    depth: usize,
}

impl Program {
    fn compile(expr: &Expr) -> Program {
        let mut p = Program {
            steps: Vec::new(),
            fields: Vec::new(),
            depth: 0,
        };
        p.depth = p.push(expr, 0);
        p
    }

    /// Appends `e`'s steps, with `below` values already on the stack; the most values on the
    /// stack meanwhile.
    fn push(&mut self, e: &Expr, below: usize) -> usize {
        match e {
            Expr::Field { name, shape } => {
                let key = (name.clone(), shape.clone());
                let i = match self.fields.iter().position(|f| *f == key) {
                    Some(i) => i,
                    None => {
                        self.fields.push(key);
                        self.fields.len() - 1
                    }
                };
                self.steps.push(Step::Load(i));
                below + 1
            }
            Expr::Const { value } => {
                self.steps.push(Step::Const(*value));
                below + 1
            }
            Expr::Unary { f, x } => {
                let d = self.push(x, below);
                self.steps.push(Step::Unary(*f));
                d
            }
            Expr::Cast { dtype, x } => {
                let d = self.push(x, below);
                self.steps.push(Step::Cast(*dtype));
                d
            }
            Expr::Binary { f, a, b } => {
                let da = self.push(a, below);
                let db = self.push(b, below + 1);
                self.steps.push(Step::Binary(*f));
                da.max(db)
            }
            Expr::Where { cond, a, b } => {
                let dc = self.push(cond, below);
                let da = self.push(a, below + 1);
                let db = self.push(b, below + 2);
                self.steps.push(Step::Where);
                dc.max(da).max(db)
            }
        }
    }
}

/// `shape` resolved against `len` values (`-1` once for the rest).
fn view_shape(name: &str, shape: &[i64], len: usize) -> Result<Vec<usize>> {
    let known: i64 = shape.iter().filter(|&&d| d != -1).product();
    let rest = shape.iter().filter(|&&d| d == -1).count();
    let bad = || {
        Error::invalid(
            OP,
            format!("field '{name}' has {len} values, which cannot be viewed as shape {shape:?}"),
        )
    };
    if rest > 1 || shape.iter().any(|&d| d < -1) || known < 0 {
        return Err(bad());
    }
    let known = known as usize;
    let out: Vec<usize> = if rest == 1 {
        if known == 0 || len % known != 0 {
            return Err(bad());
        }
        shape
            .iter()
            .map(|&d| if d == -1 { len / known } else { d as usize })
            .collect()
    } else {
        shape.iter().map(|&d| d as usize).collect()
    };
    if out.iter().product::<usize>() != len {
        return Err(bad());
    }
    Ok(out)
}

/// The shape `shapes` broadcast to (NumPy's rules), or `None` if they do not.
fn broadcast<'a>(shapes: impl Iterator<Item = &'a [usize]>) -> Option<Vec<usize>> {
    let mut out: Vec<usize> = Vec::new();
    for s in shapes {
        if s.len() > out.len() {
            let mut padded = vec![1; s.len() - out.len()];
            padded.extend_from_slice(&out);
            out = padded;
        }
        let off = out.len() - s.len();
        for (o, &d) in out[off..].iter_mut().zip(s) {
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return None;
            }
        }
    }
    Some(out)
}

/// [`broadcast`] of shapes with dimensions known only at run time (`None`): such a dimension
/// broadcast against 1 or against another unknown one stays unknown.
fn broadcast_spec(shapes: &[Vec<Option<usize>>]) -> Option<Vec<Option<usize>>> {
    let rank = shapes.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = vec![Some(1); rank];
    for s in shapes {
        let off = rank - s.len();
        for (o, &d) in out[off..].iter_mut().zip(s) {
            *o = match (*o, d) {
                (Some(1), d) | (d, Some(1)) => d,
                (Some(a), Some(b)) if a != b => return None,
                (Some(a), _) | (_, Some(a)) => Some(a),
                (None, None) => None,
            };
        }
    }
    Some(out)
}

/// How a field is read for the output's values.
enum Access {
    Range,
    Splat,
    /// The field's stride along each output axis (0 where it is broadcast).
    Strided(Vec<usize>),
}

fn access(shape: &[usize], out: &[usize]) -> Access {
    if shape == out {
        return Access::Range;
    }
    if shape.iter().product::<usize>() == 1 {
        return Access::Splat;
    }
    let off = out.len() - shape.len();
    let mut strides = vec![0; out.len()];
    let mut stride = 1;
    for (axis, &d) in shape.iter().enumerate().rev() {
        if d != 1 {
            strides[off + axis] = stride;
        }
        stride *= d;
    }
    Access::Strided(strides)
}

/// The offsets into a strided field of output values `start..start + n`.
fn strided_offsets(strides: &[usize], out: &[usize], start: usize, n: usize, at: &mut Vec<usize>) {
    at.clear();
    if n == 0 {
        return;
    }
    let mut index = vec![0; out.len()];
    let mut rest = start;
    for axis in (0..out.len()).rev() {
        index[axis] = rest % out[axis];
        rest /= out[axis];
    }
    let mut offset: usize = index.iter().zip(strides).map(|(i, s)| i * s).sum();
    for _ in 0..n {
        at.push(offset);
        for axis in (0..out.len()).rev() {
            index[axis] += 1;
            offset += strides[axis];
            if index[axis] < out[axis] {
                break;
            }
            offset -= strides[axis] * out[axis];
            index[axis] = 0;
        }
    }
}

/// The fields an expression reads, each with how the output's values read it.
struct Inputs<'a> {
    tensors: Vec<&'a Tensor>,
    access: Vec<Access>,
    shape: Vec<usize>,
}

impl Compute {
    fn inputs<'a>(&self, program: &Program, input: &'a Element) -> Result<Inputs<'a>> {
        let mut tensors = Vec::with_capacity(program.fields.len());
        let mut shapes = Vec::with_capacity(program.fields.len());
        for (name, view) in &program.fields {
            let t = &input.tensors[input.require(OP, name)?];
            if !is_numeric(t.dtype()) {
                return Err(Error::invalid(
                    OP,
                    format!("field '{name}' is {}, expected a numeric type", t.dtype()),
                ));
            }
            let shape = match view {
                Some(v) => view_shape(name, v, t.numel())?,
                None => t.shape().to_vec(),
            };
            tensors.push(t);
            shapes.push(shape);
        }
        let shape = broadcast(shapes.iter().map(Vec::as_slice)).ok_or_else(|| {
            let listed: Vec<String> = program
                .fields
                .iter()
                .zip(&shapes)
                .map(|((n, _), s)| format!("'{n}' {s:?}"))
                .collect();
            Error::invalid(
                OP,
                format!(
                    "the fields' shapes do not broadcast together: {}",
                    listed.join(", ")
                ),
            )
        })?;
        let access = shapes.iter().map(|s| access(s, &shape)).collect();
        Ok(Inputs {
            tensors,
            access,
            shape,
        })
    }

    /// Output values `start..start + out.len()`, as `T`.
    fn eval_chunk<T: Real>(
        program: &Program,
        inputs: &Inputs<'_>,
        start: usize,
        stack: &mut [Vec<T>],
        at: &mut Vec<usize>,
    ) {
        let n = stack[0].len();
        let mut top = 0;
        for step in &program.steps {
            match *step {
                Step::Load(i) => {
                    let offsets = match &inputs.access[i] {
                        Access::Range => Offsets::Range(start),
                        Access::Splat => Offsets::Splat,
                        Access::Strided(strides) => {
                            strided_offsets(strides, &inputs.shape, start, n, at);
                            Offsets::At(at)
                        }
                    };
                    // Validated when the inputs were gathered: dtype and size match.
                    let _ = T::load(inputs.tensors[i], offsets, &mut stack[top]);
                    top += 1;
                }
                Step::Const(v) => {
                    stack[top].fill(T::from_f64(v));
                    top += 1;
                }
                Step::Unary(f) => {
                    for x in stack[top - 1].iter_mut() {
                        *x = T::unary(f, *x);
                    }
                }
                Step::Cast(dtype) => {
                    for x in stack[top - 1].iter_mut() {
                        *x = T::from_f64(as_dtype(dtype, x.to_f64()));
                    }
                }
                Step::Binary(f) => {
                    let (lower, upper) = stack.split_at_mut(top - 1);
                    for (a, &b) in lower[top - 2].iter_mut().zip(&upper[0]) {
                        *a = T::binary(f, *a, b);
                    }
                    top -= 1;
                }
                Step::Where => {
                    let (lower, upper) = stack.split_at_mut(top - 2);
                    let (a, b) = upper.split_at(1);
                    for ((c, &x), &y) in lower[top - 3].iter_mut().zip(&a[0]).zip(&b[0]) {
                        *c = if *c != T::ZERO { x } else { y };
                    }
                    top -= 2;
                }
            }
        }
    }

    /// The output tensor of `U` values (the output dtype's), computed in `T`.
    fn run<T: Real, U: bytemuck::Pod>(
        &self,
        program: &Program,
        inputs: &Inputs<'_>,
        ctx: &OpCtx<'_>,
        convert: impl Fn(T) -> U,
    ) -> Result<Tensor> {
        let total: usize = inputs.shape.iter().product();
        let mut stack: Vec<Vec<T>> = vec![vec![T::ZERO; CHUNK]; program.depth];
        let mut at = Vec::with_capacity(CHUNK);
        build_chunks_into(
            ctx,
            &self.output,
            self.dtype,
            inputs.shape.clone(),
            CHUNK,
            |i, out: &mut [U]| {
                let start = i * CHUNK;
                let n = out.len().min(total - start);
                for s in stack.iter_mut() {
                    s.truncate(n);
                    s.resize(n, T::ZERO);
                }
                Self::eval_chunk(program, inputs, start, &mut stack, &mut at);
                for (o, &v) in out.iter_mut().zip(&stack[0]) {
                    *o = convert(v);
                }
            },
        )
    }

    fn compute<T: Real>(
        &self,
        program: &Program,
        inputs: &Inputs<'_>,
        ctx: &OpCtx<'_>,
    ) -> Result<Tensor> {
        macro_rules! out {
            ($u:ty, $f:expr) => {
                self.run::<T, $u>(program, inputs, ctx, $f)
            };
        }
        match self.dtype {
            DType::Bool => out!(u8, |v: T| u8::from(v != T::ZERO)),
            DType::U8 => out!(u8, |v: T| float_to_narrow(v.to_f64(), u8::MIN, u8::MAX)),
            DType::I8 => out!(i8, |v: T| float_to_narrow(v.to_f64(), i8::MIN, i8::MAX)),
            DType::I16 => out!(i16, |v: T| float_to_narrow(v.to_f64(), i16::MIN, i16::MAX)),
            DType::U16 => out!(u16, |v: T| float_to_narrow(v.to_f64(), u16::MIN, u16::MAX)),
            DType::I32 => out!(i32, |v: T| float_to_i32(v.to_f64())),
            DType::I64 => out!(i64, |v: T| float_to_i64(v.to_f64())),
            DType::F16 => out!(half::f16, |v: T| half::f16::from_f64(v.to_f64())),
            DType::BF16 => out!(half::bf16, |v: T| half::bf16::from_f64(v.to_f64())),
            DType::F32 => out!(f32, |v: T| v.to_f64() as f32),
            DType::F64 => out!(f64, |v: T| v.to_f64()),
            DType::Bytes => Err(Error::schema(OP, "the output must be a numeric type")),
        }
    }

    /// Whether values are computed in float32 (else float64): for float32 and narrower
    /// outputs, which float32 holds exactly or rounds to anyway.
    fn in_f32(&self) -> bool {
        matches!(
            self.dtype,
            DType::F32
                | DType::F16
                | DType::BF16
                | DType::U8
                | DType::I8
                | DType::I16
                | DType::U16
                | DType::Bool
        )
    }
}

impl Op for Compute {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        let program = Program::compile(&self.expr);
        let mut reads: Vec<String> = program.fields.into_iter().map(|(n, _)| n).collect();
        reads.dedup();
        Fields::Named {
            reads,
            writes: vec![self.output.clone()],
        }
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        if !is_numeric(self.dtype) {
            return Err(Error::schema(OP, "the output must be a numeric type"));
        }
        // An expression of constants only is a scalar of that value in every element.
        let program = Program::compile(&self.expr);
        if input.dynamic {
            return Ok(input.clone());
        }
        let mut shapes = Vec::new();
        for (name, view) in &program.fields {
            let Some(f) = input.lookup(OP, name)? else {
                return Ok(input.clone());
            };
            if !is_numeric(f.dtype) {
                return Err(Error::schema(
                    OP,
                    format!("field '{name}' is {}, expected a numeric type", f.dtype),
                ));
            }
            let known: Option<Vec<usize>> = f.shape.iter().copied().collect();
            shapes.push(match (view, known) {
                (None, _) => f.shape.clone(),
                (Some(v), Some(k)) => view_shape(name, v, k.iter().product())?
                    .into_iter()
                    .map(Some)
                    .collect(),
                (Some(v), None) => v.iter().map(|&d| usize::try_from(d).ok()).collect(),
            });
        }
        let shape = broadcast_spec(&shapes)
            .ok_or_else(|| Error::schema(OP, "the fields' shapes do not broadcast together"))?;
        Ok(with_field(
            input,
            FieldSpec::new(self.output.as_str(), self.dtype, shape),
        ))
    }

    fn apply(&self, input: Element, ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let program = Program::compile(&self.expr);
        let out = {
            let inputs = self.inputs(&program, &input)?;
            if self.in_f32() {
                self.compute::<f32>(&program, &inputs, ctx)?
            } else {
                self.compute::<f64>(&program, &inputs, ctx)?
            }
        };
        Ok(Some(put(input, &self.output, out)))
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stoker_core::element::names;
    use stoker_core::stats::StageStats;
    use stoker_core::ErrorPolicy;

    fn field(name: &str) -> Box<Expr> {
        Box::new(Expr::Field {
            name: name.into(),
            shape: None,
        })
    }

    fn constant(value: f64) -> Box<Expr> {
        Box::new(Expr::Const { value })
    }

    fn bin(f: Binary, a: Box<Expr>, b: Box<Expr>) -> Box<Expr> {
        Box::new(Expr::Binary { f, a, b })
    }

    fn apply(op: &Compute, element: Element) -> Result<Tensor> {
        let stats = StageStats::new("t", "t");
        let ctx = OpCtx {
            policy: ErrorPolicy::Raise,
            stats: &stats,
            element: 0,
            epoch: 0,
            row: None,
            seeds: stoker_core::Seeds::none(),
            skipped: Default::default(),
        };
        let out = op.apply(element, &ctx)?.unwrap();
        Ok(out.tensors[out.index(&op.output).unwrap()].clone())
    }

    fn run(op: &Compute, element: Element) -> Tensor {
        apply(op, element).unwrap()
    }

    fn element(fields: Vec<(&str, Tensor)>) -> Element {
        let (n, tensors): (Vec<&str>, Vec<Tensor>) = fields.into_iter().unzip();
        Element::new(names(&n), tensors)
    }

    #[test]
    fn broadcasts_and_computes_in_chunks() {
        // x: (2, 300) int64, y: (300,) float64, z: () — the output spans two chunks and more.
        let xs: Vec<i64> = (0..600).collect();
        let ys: Vec<f64> = (0..300).map(|i| f64::from(i) * 0.5).collect();
        let e = element(vec![
            (
                "x",
                Tensor::from_slice(DType::I64, vec![2, 300], &xs).unwrap(),
            ),
            ("y", Tensor::from_slice(DType::F64, vec![300], &ys).unwrap()),
            (
                "z",
                Tensor::from_slice(DType::F64, vec![], &[3.0f64]).unwrap(),
            ),
        ]);
        // where(x > y, x - y * z, -x)
        let expr = Expr::Where {
            cond: bin(Binary::Greater, field("x"), field("y")),
            a: bin(
                Binary::Sub,
                field("x"),
                bin(Binary::Mul, field("y"), field("z")),
            ),
            b: Box::new(Expr::Unary {
                f: Unary::Neg,
                x: field("x"),
            }),
        };
        let op = Compute {
            output: "out".into(),
            expr,
            dtype: DType::F64,
        };
        let out = run(&op, e);
        assert_eq!(out.shape(), &[2, 300]);
        let got = out.typed::<f64>().unwrap();
        for (i, &g) in got.iter().enumerate() {
            let (x, y) = (i as f64, ys[i % 300]);
            let want = if x > y { x - y * 3.0 } else { -x };
            assert_eq!(g, want, "value {i}");
        }
    }

    #[test]
    fn a_column_broadcasts_along_the_rows() {
        // (3, 1) + (4,) → (3, 4): the strided path.
        let e = element(vec![
            (
                "a",
                Tensor::from_slice(DType::F32, vec![3, 1], &[0f32, 10.0, 20.0]).unwrap(),
            ),
            (
                "b",
                Tensor::from_slice(DType::F32, vec![4], &[1f32, 2.0, 3.0, 4.0]).unwrap(),
            ),
        ]);
        let op = Compute {
            output: "c".into(),
            expr: *bin(Binary::Add, field("a"), field("b")),
            dtype: DType::F32,
        };
        let out = run(&op, e);
        assert_eq!(out.shape(), &[3, 4]);
        assert_eq!(
            out.typed::<f32>().unwrap(),
            &[1.0, 2.0, 3.0, 4.0, 11.0, 12.0, 13.0, 14.0, 21.0, 22.0, 23.0, 24.0]
        );
    }

    #[test]
    fn casts_views_and_integer_outputs() {
        let e = element(vec![(
            "v",
            Tensor::from_slice(DType::F32, vec![4, 1], &[-2.7f32, -0.5, 0.5, 300.9]).unwrap(),
        )]);
        let view = Box::new(Expr::Field {
            name: "v".into(),
            shape: Some(vec![-1]),
        });
        // cast(v, int8) + 1, as uint8: truncate toward zero, saturate.
        let op = Compute {
            output: "w".into(),
            expr: *bin(
                Binary::Add,
                Box::new(Expr::Cast {
                    dtype: DType::I8,
                    x: view,
                }),
                constant(1.0),
            ),
            dtype: DType::U8,
        };
        let out = run(&op, e);
        assert_eq!(out.shape(), &[4]);
        assert_eq!(out.typed::<u8>().unwrap(), &[0, 1, 1, 128]);
    }

    #[test]
    fn mismatched_shapes_and_views_name_the_fields() {
        let e = element(vec![
            (
                "a",
                Tensor::from_slice(DType::F32, vec![3], &[1f32, 2.0, 3.0]).unwrap(),
            ),
            (
                "b",
                Tensor::from_slice(DType::F32, vec![2], &[1f32, 2.0]).unwrap(),
            ),
        ]);
        let op = Compute {
            output: "c".into(),
            expr: *bin(Binary::Add, field("a"), field("b")),
            dtype: DType::F32,
        };
        let err = apply(&op, e.clone()).unwrap_err().to_string();
        assert!(err.contains("'a' [3]") && err.contains("'b' [2]"), "{err}");
        let bad_view = Compute {
            output: "c".into(),
            expr: Expr::Field {
                name: "a".into(),
                shape: Some(vec![2, -1]),
            },
            dtype: DType::F32,
        };
        let err = apply(&bad_view, e).unwrap_err().to_string();
        assert!(err.contains("3 values") && err.contains("[2, -1]"), "{err}");
    }

    #[test]
    fn tanh_saturates_and_keeps_nan() {
        assert_eq!(tanh_f32(100.0), 1.0);
        assert_eq!(tanh_f32(-100.0), -1.0);
        assert_eq!(tanh_f32(0.0), 0.0);
        assert!(tanh_f32(f32::NAN).is_nan());
        for i in -800..800 {
            let x = i as f32 / 100.0;
            let exact = f64::from(x).tanh();
            assert!((f64::from(tanh_f32(x)) - exact).abs() < 1e-6, "{x}");
        }
    }
}
