//! The models of `[trial.model] kind`: an MLP, a small CNN, a small CIFAR-style ResNet and a
//! small pre-norm Transformer language model. Sizes come from the trial's knobs (`width`,
//! `depth`, `dropout`, and for the Transformer `heads` and `context`); with `checkpointing`
//! the ResNet's residual blocks and the Transformer's layers recompute their activations in
//! the backward pass instead of keeping them (see [`crate::checkpoint`]).

use std::sync::{Arc, Mutex, MutexGuard};

use tch::nn::{self, ModuleT};
use tch::{Kind, Tensor};

use super::checkpoint::{Pass, checkpoint};
use super::data::Task;
use tune::builtin::{Hyper, ModelKind};

/// Builds the model of `h` for a data set with this task and sample shape, its parameters
/// under `vs`.
pub fn build(
    vs: &nn::Path,
    h: &Hyper,
    task: Task,
    sample_shape: &[i64],
) -> Result<Box<dyn ModuleT>, String> {
    let classes = match task {
        Task::Classify { classes } => classes,
        Task::Language { vocab } => vocab,
    };
    Ok(match h.model {
        ModelKind::Mlp => Box::new(mlp(vs, h, sample_shape.iter().product(), classes)),
        ModelKind::Cnn => Box::new(cnn(vs, h, image_shape(sample_shape)?, classes)),
        ModelKind::Resnet => Box::new(ResNet::new(vs, h, image_shape(sample_shape)?, classes)),
        ModelKind::Transformer => Box::new(Transformer::new(vs, h, classes)),
    })
}

/// The same tensor in channels-last (NHWC) layout, its shape unchanged. tch has no memory
/// format API, but libtorch tells the layout from the strides, so the copy goes into a tensor
/// with channels-last strides made for it (a permute-and-contiguous would leave a tensor with
/// one channel in the default layout, as its strides would be ambiguous). oneDNN's
/// convolutions on the CPU run 25–60% faster on this layout (measured with torch 2.13: 1 611 →
/// 1 958 samples per CPU-second for the CNN in fp32, 2 560 → 4 255 in bf16), and a
/// convolution whose weight is channels-last keeps its output so, so the whole network runs
/// in it.
pub fn channels_last(t: &Tensor) -> Tensor {
    let size = t.size();
    let [n, c, h, w] = size[..] else {
        return t.shallow_clone();
    };
    let strides = [h * w * c, 1, w * c, c];
    if t.stride() == strides || n == 0 {
        return t.shallow_clone();
    }
    let mut out = Tensor::empty_strided(&size, strides, (t.kind(), t.device()));
    out.copy_(t);
    out
}

/// Puts the 4-D parameters (convolution weights) of a convolutional model in channels-last
/// layout; other models are left as they are.
pub fn prepare(vs: &nn::VarStore, h: &Hyper) {
    if matches!(h.model, ModelKind::Cnn | ModelKind::Resnet) {
        tch::no_grad(|| {
            for mut p in vs.trainable_variables() {
                if p.dim() == 4 {
                    let cl = channels_last(&p);
                    p.set_data(&cl);
                }
            }
        });
    }
}

/// (channels, height, width) of an image sample; (H, W) gets one channel.
fn image_shape(s: &[i64]) -> Result<(i64, i64, i64), String> {
    match *s {
        [c, h, w] => Ok((c, h, w)),
        [h, w] => Ok((1, h, w)),
        _ => Err(format!(
            "a convolutional model needs image samples (C×H×W or H×W), not shape {s:?}"
        )),
    }
}

fn mlp(vs: &nn::Path, h: &Hyper, inputs: i64, classes: i64) -> nn::SequentialT {
    let mut seq = nn::seq_t().add_fn(|x| x.flatten(1, -1));
    let mut n_in = inputs;
    for i in 0..h.depth {
        seq = seq
            .add(nn::linear(
                vs / format!("fc{i}"),
                n_in,
                h.width,
                Default::default(),
            ))
            .add_fn(|x| x.relu());
        if h.dropout > 0.0 {
            let p = h.dropout;
            seq = seq.add_fn_t(move |x, train| x.dropout(p, train));
        }
        n_in = h.width;
    }
    seq.add(nn::linear(vs / "out", n_in, classes, Default::default()))
}

/// `depth` blocks of conv 3×3 + ReLU + 2×2 max-pool (while the image is at least 2×2),
/// channels `width`, `2·width`, …, then a linear classifier.
fn cnn(vs: &nn::Path, h: &Hyper, (c, hh, ww): (i64, i64, i64), classes: i64) -> nn::SequentialT {
    // An (H, W) sample gets its channel here.
    let mut seq = nn::seq_t().add_fn(move |x| channels_last(&x.view([-1, c, hh, ww])));
    let conv = nn::ConvConfig {
        padding: 1,
        ..Default::default()
    };
    let (mut ch, mut sh, mut sw) = (c, hh, ww);
    for i in 0..h.depth {
        let out = h.width << i.min(4);
        seq = seq
            .add(nn::conv2d(vs / format!("conv{i}"), ch, out, 3, conv))
            .add_fn(|x| x.relu());
        if sh >= 2 && sw >= 2 {
            seq = seq.add_fn(|x| x.max_pool2d_default(2));
            sh /= 2;
            sw /= 2;
        }
        ch = out;
    }
    seq = seq.add_fn(|x| x.flatten(1, -1));
    if h.dropout > 0.0 {
        let p = h.dropout;
        seq = seq.add_fn_t(move |x, train| x.dropout(p, train));
    }
    seq.add(nn::linear(
        vs / "out",
        ch * sh * sw,
        classes,
        Default::default(),
    ))
}

/// A block that checkpointing's graph nodes share: they own their closure, may outlive the
/// forward pass that made them and may run on the autograd engine's device thread, and a
/// `Tensor` is `Send` but not `Sync`, hence the mutex (never contended: the recomputation runs
/// while the training thread waits for `backward`).
type Shared<T> = Arc<Mutex<T>>;

/// The block, also after a panic in another holder (its tensors stay valid).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The parameters of a layer, for checkpointing (which must be given every one).
fn weights(ws: &Tensor, bs: &Option<Tensor>) -> impl Iterator<Item = Tensor> {
    std::iter::once(ws.shallow_clone()).chain(bs.iter().map(Tensor::shallow_clone))
}

fn batch_norm_config() -> nn::BatchNormConfig {
    nn::BatchNormConfig::default()
}

/// BatchNorm in training or evaluation mode; a recomputation normalises with the batch's
/// statistics as the forward pass did, but without updating the running ones a second time.
fn bn(x: &Tensor, m: &nn::BatchNorm, train: bool, pass: Pass) -> Tensor {
    if !train || pass == Pass::Forward {
        return x.apply_t(m, train);
    }
    let c = batch_norm_config();
    Tensor::batch_norm(
        x,
        m.ws.as_ref(),
        m.bs.as_ref(),
        None::<&Tensor>,
        None::<&Tensor>,
        true,
        c.momentum,
        c.eps,
        c.cudnn_enabled,
    )
}

/// A basic residual block: conv-BN-ReLU-conv-BN plus the (projected) input.
#[derive(Debug)]
struct Block {
    c1: nn::Conv2D,
    b1: nn::BatchNorm,
    c2: nn::Conv2D,
    b2: nn::BatchNorm,
    proj: Option<(nn::Conv2D, nn::BatchNorm)>,
}

impl Block {
    fn new(vs: &nn::Path, c_in: i64, c_out: i64, stride: i64) -> Block {
        let conv = |p: nn::Path, i, o, k, s, pad| {
            nn::conv2d(
                p,
                i,
                o,
                k,
                nn::ConvConfig {
                    stride: s,
                    padding: pad,
                    bias: false,
                    ..Default::default()
                },
            )
        };
        Block {
            c1: conv(vs / "c1", c_in, c_out, 3, stride, 1),
            b1: nn::batch_norm2d(vs / "b1", c_out, batch_norm_config()),
            c2: conv(vs / "c2", c_out, c_out, 3, 1, 1),
            b2: nn::batch_norm2d(vs / "b2", c_out, batch_norm_config()),
            proj: (stride != 1 || c_in != c_out).then(|| {
                (
                    conv(vs / "pc", c_in, c_out, 1, stride, 0),
                    nn::batch_norm2d(vs / "pb", c_out, batch_norm_config()),
                )
            }),
        }
    }

    fn forward(&self, x: &Tensor, train: bool, pass: Pass) -> Tensor {
        let y = bn(&x.apply(&self.c1), &self.b1, train, pass).relu();
        let y = bn(&y.apply(&self.c2), &self.b2, train, pass);
        let skip = match &self.proj {
            Some((c, b)) => bn(&x.apply(c), b, train, pass),
            None => x.shallow_clone(),
        };
        (y + skip).relu()
    }

    fn params(&self) -> Vec<Tensor> {
        let mut convs = vec![&self.c1, &self.c2];
        let mut norms = vec![&self.b1, &self.b2];
        if let Some((c, b)) = &self.proj {
            convs.push(c);
            norms.push(b);
        }
        let convs = convs.into_iter().flat_map(|c| weights(&c.ws, &c.bs));
        let norms = norms.into_iter().flat_map(|b| {
            b.ws.iter()
                .chain(b.bs.iter())
                .map(Tensor::shallow_clone)
                .collect::<Vec<_>>()
        });
        convs.chain(norms).collect()
    }
}

/// A CIFAR-style ResNet: a 3×3 stem of `width` channels, three stages of `depth` basic blocks
/// (`width`, `2·width`, `4·width` channels; stride 2 into stages 2 and 3), global average
/// pooling and a linear classifier.
#[derive(Debug)]
struct ResNet {
    shape: (i64, i64, i64),
    stem: nn::Conv2D,
    bn: nn::BatchNorm,
    blocks: Vec<Shared<Block>>,
    dropout: f64,
    fc: nn::Linear,
    checkpointing: bool,
}

impl ResNet {
    fn new(vs: &nn::Path, h: &Hyper, shape: (i64, i64, i64), classes: i64) -> ResNet {
        let c = shape.0;
        let w = h.width;
        let stem = nn::conv2d(
            vs / "stem",
            c,
            w,
            3,
            nn::ConvConfig {
                padding: 1,
                bias: false,
                ..Default::default()
            },
        );
        let mut blocks = Vec::new();
        let mut c_in = w;
        for stage in 0..3 {
            let c_out = w << stage;
            for i in 0..h.depth {
                let stride = if stage > 0 && i == 0 { 2 } else { 1 };
                blocks.push(Arc::new(Mutex::new(Block::new(
                    &(vs / format!("s{stage}b{i}")),
                    c_in,
                    c_out,
                    stride,
                ))));
                c_in = c_out;
            }
        }
        ResNet {
            shape,
            stem,
            bn: nn::batch_norm2d(vs / "bn", w, batch_norm_config()),
            blocks,
            dropout: h.dropout,
            fc: nn::linear(vs / "fc", c_in, classes, Default::default()),
            checkpointing: h.checkpointing,
        }
    }
}

impl ModuleT for ResNet {
    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let (c, h, w) = self.shape;
        let mut y = channels_last(&x.view([-1, c, h, w]))
            .apply(&self.stem)
            .apply_t(&self.bn, train)
            .relu();
        for b in &self.blocks {
            y = if self.checkpointing && train {
                let params = lock(b).params();
                let b = Arc::clone(b);
                // The blocks draw no random numbers: no RNG state to keep.
                checkpoint(&y, &params, false, move |x, pass| {
                    lock(&b).forward(x, true, pass)
                })
            } else {
                lock(b).forward(&y, train, Pass::Forward)
            };
        }
        y.adaptive_avg_pool2d([1, 1])
            .flatten(1, -1)
            .dropout(self.dropout, train)
            .apply(&self.fc)
    }
}

/// One pre-norm Transformer layer with causal self-attention.
#[derive(Debug)]
struct Layer {
    ln1: nn::LayerNorm,
    qkv: nn::Linear,
    proj: nn::Linear,
    ln2: nn::LayerNorm,
    fc1: nn::Linear,
    fc2: nn::Linear,
}

impl Layer {
    /// `y`: (B, T, d) in, (B, T, d) out.
    fn forward(&self, y: &Tensor, heads: i64, dropout: f64, train: bool) -> Tensor {
        let (b, t, d) = (y.size()[0], y.size()[1], y.size()[2]);
        let hd = d / heads;
        let qkv = y
            .apply(&self.ln1)
            .apply(&self.qkv)
            .view([b, t, 3, heads, hd])
            .permute([2, 0, 3, 1, 4]);
        let (q, k, v) = (qkv.get(0), qkv.get(1), qkv.get(2));
        let a = Tensor::scaled_dot_product_attention(
            &q,
            &k,
            &v,
            None::<Tensor>,
            if train { dropout } else { 0.0 },
            true,
            None,
            false,
        )
        .transpose(1, 2)
        .reshape([b, t, d]);
        // Not `+=`: layer norm saved `y` for its backward pass, so it must not change in
        // place.
        let y = y + a.apply(&self.proj).dropout(dropout, train);
        let m = y
            .apply(&self.ln2)
            .apply(&self.fc1)
            .gelu("none")
            .apply(&self.fc2);
        &y + m.dropout(dropout, train)
    }

    fn params(&self) -> Vec<Tensor> {
        let norms = [&self.ln1, &self.ln2]
            .into_iter()
            .flat_map(|l| l.ws.iter().chain(l.bs.iter()).map(Tensor::shallow_clone));
        let linears = [&self.qkv, &self.proj, &self.fc1, &self.fc2]
            .into_iter()
            .flat_map(|l| weights(&l.ws, &l.bs));
        norms.chain(linears).collect()
    }
}

/// A small GPT-style language model over byte tokens: token and learned position embeddings,
/// `depth` pre-norm layers of `heads`-head causal attention and a 4× GELU MLP, a final
/// layer norm and a linear head.
#[derive(Debug)]
struct Transformer {
    tok: nn::Embedding,
    pos: nn::Embedding,
    layers: Vec<Shared<Layer>>,
    ln: nn::LayerNorm,
    head: nn::Linear,
    heads: i64,
    dropout: f64,
    checkpointing: bool,
}

impl Transformer {
    fn new(vs: &nn::Path, h: &Hyper, vocab: i64) -> Transformer {
        let d = h.width;
        let layers = (0..h.depth)
            .map(|i| {
                let p = vs / format!("l{i}");
                Arc::new(Mutex::new(Layer {
                    ln1: nn::layer_norm(&p / "ln1", vec![d], Default::default()),
                    qkv: nn::linear(&p / "qkv", d, 3 * d, Default::default()),
                    proj: nn::linear(&p / "proj", d, d, Default::default()),
                    ln2: nn::layer_norm(&p / "ln2", vec![d], Default::default()),
                    fc1: nn::linear(&p / "fc1", d, 4 * d, Default::default()),
                    fc2: nn::linear(&p / "fc2", 4 * d, d, Default::default()),
                }))
            })
            .collect();
        Transformer {
            tok: nn::embedding(vs / "tok", vocab, d, Default::default()),
            pos: nn::embedding(vs / "pos", h.context, d, Default::default()),
            layers,
            ln: nn::layer_norm(vs / "ln", vec![d], Default::default()),
            head: nn::linear(vs / "head", d, vocab, Default::default()),
            heads: h.heads,
            dropout: h.dropout,
            checkpointing: h.checkpointing,
        }
    }
}

impl ModuleT for Transformer {
    /// `x`: (B, T) token ids; returns (B, T, vocab) logits.
    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let t = x.size()[1];
        let pos = Tensor::arange(t, (Kind::Int64, x.device()));
        let mut y = x.apply(&self.tok) + pos.apply(&self.pos).unsqueeze(0);
        y = y.dropout(self.dropout, train);
        let (heads, dropout) = (self.heads, self.dropout);
        for l in &self.layers {
            y = if self.checkpointing && train {
                let params = lock(l).params();
                let l = Arc::clone(l);
                // Dropout draws random numbers: the recomputation must draw the same.
                checkpoint(&y, &params, dropout > 0.0, move |x, _| {
                    lock(&l).forward(x, heads, dropout, true)
                })
            } else {
                lock(l).forward(&y, heads, dropout, train)
            };
        }
        y.apply(&self.ln).apply(&self.head)
    }
}

#[cfg(test)]
mod tests {
    use super::super::data;
    use super::*;
    use tch::Device;

    use crate::fit::Session;
    use std::collections::BTreeMap;
    use tune::builtin::Amp;

    fn hyper(model: ModelKind, amp: Amp, checkpointing: bool, dropout: f64) -> Hyper {
        Hyper {
            model,
            lr: 1e-3,
            optimizer: tune::builtin::OptimizerKind::Adam,
            amp,
            reference_batch: 8,
            width: 8,
            depth: 2,
            dropout,
            heads: 2,
            context: 12,
            checkpointing,
            ..crate::test_hyper()
        }
    }

    /// One forward and backward pass of a fresh model (seeded) on `batch`: the loss, every
    /// gradient and every variable (BatchNorm's running statistics among them) by name.
    fn one_pass(
        h: &Hyper,
        task: Task,
        shape: &[i64],
        batch: &data::Batch,
    ) -> (f64, BTreeMap<String, Tensor>, BTreeMap<String, Tensor>) {
        tch::manual_seed(11);
        let mut s = Session::new(h, task, shape, Device::Cpu, h.lr).expect("model");
        // The same dropout masks on both sides unless checkpointing changed the stream.
        tch::manual_seed(5);
        let mut once = Some(data::Batch {
            x: batch.x.shallow_clone(),
            y: batch.y.shallow_clone(),
        });
        let loss = s
            .accumulate(&mut || Ok(once.take().expect("one batch")), 1)
            .expect("a step");
        let grads =
            s.vs.trainable_variables()
                .iter()
                .zip(s.grads())
                .map(|(p, g)| (format!("{:?}", p.size()), g))
                .enumerate()
                .map(|(i, (k, g))| (format!("{i}:{k}"), g))
                .collect();
        let vars = s.vs.variables().into_iter().collect();
        (loss.double_value(&[]), grads, vars)
    }

    fn rel_diff(a: &Tensor, b: &Tensor) -> f64 {
        let (a, b) = (a.to_kind(Kind::Float), b.to_kind(Kind::Float));
        let diff = (&a - &b).abs().max().double_value(&[]);
        diff / a.abs().max().double_value(&[]).max(1e-6)
    }

    /// Checkpointing gives the loss and gradients of the plain model, within `tol` (relative to
    /// each tensor's largest entry), and leaves the running statistics as it does.
    fn same_with_and_without_checkpointing(
        model: ModelKind,
        amp: Amp,
        dropout: f64,
        task: Task,
        shape: &[i64],
        batch: data::Batch,
        tol: f64,
    ) {
        let plain = one_pass(&hyper(model, amp, false, dropout), task, shape, &batch);
        let ckpt = one_pass(&hyper(model, amp, true, dropout), task, shape, &batch);
        let what = format!("{} {amp} dropout {dropout}", model.as_str());
        assert!(
            (plain.0 - ckpt.0).abs() <= tol * plain.0.abs(),
            "{what}: loss {} vs {}",
            plain.0,
            ckpt.0
        );
        assert_eq!(plain.1.len(), ckpt.1.len());
        for (k, g) in &plain.1 {
            let d = rel_diff(g, &ckpt.1[k]);
            assert!(d <= tol, "{what}: gradient {k} differs by {d:e}");
        }
        for (k, v) in &plain.2 {
            let d = rel_diff(v, &ckpt.2[k]);
            assert!(d <= tol, "{what}: variable {k} differs by {d:e}");
        }
    }

    fn image_batch() -> data::Batch {
        data::Batch {
            x: Tensor::randn([8, 1, 8, 8], (Kind::Float, Device::Cpu)),
            y: Tensor::randint(10, [8], (Kind::Int64, Device::Cpu)),
        }
    }

    fn text_batch() -> data::Batch {
        data::Batch {
            x: Tensor::randint(256, [8, 12], (Kind::Int64, Device::Cpu)),
            y: Tensor::randint(256, [8, 12], (Kind::Int64, Device::Cpu)),
        }
    }

    #[test]
    fn a_checkpointed_resnet_gives_the_same_loss_gradients_and_running_stats_in_fp32() {
        let _rng = crate::torch_rng_lock();
        tch::manual_seed(1);
        let task = Task::Classify { classes: 10 };
        same_with_and_without_checkpointing(
            ModelKind::Resnet,
            Amp::Off,
            0.0,
            task,
            &[1, 8, 8],
            image_batch(),
            1e-5,
        );
    }

    #[test]
    fn a_checkpointed_transformer_gives_the_same_loss_and_gradients_in_fp32_with_dropout() {
        let _rng = crate::torch_rng_lock();
        tch::manual_seed(2);
        let task = Task::Language { vocab: 256 };
        for dropout in [0.0, 0.2] {
            same_with_and_without_checkpointing(
                ModelKind::Transformer,
                Amp::Off,
                dropout,
                task,
                &[12],
                text_batch(),
                1e-5,
            );
        }
    }

    /// Under bf16 autocast the recomputation runs the same bf16 kernels on the same inputs,
    /// so it matches as closely; the tolerance is bf16's resolution (2^-8) in case a kernel's
    /// order of summation differs between the passes.
    #[test]
    fn checkpointed_models_give_the_same_loss_and_gradients_under_bf16_autocast() {
        let _rng = crate::torch_rng_lock();
        tch::manual_seed(3);
        same_with_and_without_checkpointing(
            ModelKind::Resnet,
            Amp::Bf16,
            0.0,
            Task::Classify { classes: 10 },
            &[1, 8, 8],
            image_batch(),
            4e-3,
        );
        same_with_and_without_checkpointing(
            ModelKind::Transformer,
            Amp::Bf16,
            0.1,
            Task::Language { vocab: 256 },
            &[12],
            text_batch(),
            4e-3,
        );
    }

    #[test]
    fn channels_last_keeps_values_and_shape_and_gives_nhwc_strides_even_with_one_channel() {
        let _rng = crate::torch_rng_lock();
        for c in [1, 3] {
            let x = Tensor::randn([2, c, 4, 5], (Kind::Float, Device::Cpu));
            let y = channels_last(&x);
            assert_eq!(y.size(), x.size());
            assert_eq!(y.stride(), vec![20 * c, 1, 5 * c, c]);
            assert_eq!((&y - &x).abs().max().double_value(&[]), 0.0);
        }
    }
}
