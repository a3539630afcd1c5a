//! The models of `[trial.model] kind`: an MLP, a small CNN, a small CIFAR-style ResNet and a
//! small pre-norm Transformer language model. Sizes come from the trial's knobs (`width`,
//! `depth`, `dropout`, and for the Transformer `heads` and `context`).

use tch::nn::{self, ModuleT};
use tch::{Kind, Tensor};

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
            b1: nn::batch_norm2d(vs / "b1", c_out, Default::default()),
            c2: conv(vs / "c2", c_out, c_out, 3, 1, 1),
            b2: nn::batch_norm2d(vs / "b2", c_out, Default::default()),
            proj: (stride != 1 || c_in != c_out).then(|| {
                (
                    conv(vs / "pc", c_in, c_out, 1, stride, 0),
                    nn::batch_norm2d(vs / "pb", c_out, Default::default()),
                )
            }),
        }
    }
}

impl ModuleT for Block {
    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let y = x
            .apply(&self.c1)
            .apply_t(&self.b1, train)
            .relu()
            .apply(&self.c2)
            .apply_t(&self.b2, train);
        let skip = match &self.proj {
            Some((c, b)) => x.apply(c).apply_t(b, train),
            None => x.shallow_clone(),
        };
        (y + skip).relu()
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
    blocks: Vec<Block>,
    dropout: f64,
    fc: nn::Linear,
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
                blocks.push(Block::new(
                    &(vs / format!("s{stage}b{i}")),
                    c_in,
                    c_out,
                    stride,
                ));
                c_in = c_out;
            }
        }
        ResNet {
            shape,
            stem,
            bn: nn::batch_norm2d(vs / "bn", w, Default::default()),
            blocks,
            dropout: h.dropout,
            fc: nn::linear(vs / "fc", c_in, classes, Default::default()),
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
            y = b.forward_t(&y, train);
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

/// A small GPT-style language model over byte tokens: token and learned position embeddings,
/// `depth` pre-norm layers of `heads`-head causal attention and a 4× GELU MLP, a final
/// layer norm and a linear head.
#[derive(Debug)]
struct Transformer {
    tok: nn::Embedding,
    pos: nn::Embedding,
    layers: Vec<Layer>,
    ln: nn::LayerNorm,
    head: nn::Linear,
    heads: i64,
    dropout: f64,
}

impl Transformer {
    fn new(vs: &nn::Path, h: &Hyper, vocab: i64) -> Transformer {
        let d = h.width;
        let layers = (0..h.depth)
            .map(|i| {
                let p = vs / format!("l{i}");
                Layer {
                    ln1: nn::layer_norm(&p / "ln1", vec![d], Default::default()),
                    qkv: nn::linear(&p / "qkv", d, 3 * d, Default::default()),
                    proj: nn::linear(&p / "proj", d, d, Default::default()),
                    ln2: nn::layer_norm(&p / "ln2", vec![d], Default::default()),
                    fc1: nn::linear(&p / "fc1", d, 4 * d, Default::default()),
                    fc2: nn::linear(&p / "fc2", 4 * d, d, Default::default()),
                }
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
        }
    }
}

impl ModuleT for Transformer {
    /// `x`: (B, T) token ids; returns (B, T, vocab) logits.
    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let (b, t) = (x.size()[0], x.size()[1]);
        let pos = Tensor::arange(t, (Kind::Int64, x.device()));
        let mut y = x.apply(&self.tok) + pos.apply(&self.pos).unsqueeze(0);
        y = y.dropout(self.dropout, train);
        let d = y.size()[2];
        let hd = d / self.heads;
        for l in &self.layers {
            let qkv = y
                .apply(&l.ln1)
                .apply(&l.qkv)
                .view([b, t, 3, self.heads, hd])
                .permute([2, 0, 3, 1, 4]);
            let (q, k, v) = (qkv.get(0), qkv.get(1), qkv.get(2));
            let a = Tensor::scaled_dot_product_attention(
                &q,
                &k,
                &v,
                None::<Tensor>,
                if train { self.dropout } else { 0.0 },
                true,
                None,
                false,
            )
            .transpose(1, 2)
            .reshape([b, t, d]);
            // Not `+=`: layer norm saved `y` for its backward pass, so it must not change in
            // place.
            y = &y + a.apply(&l.proj).dropout(self.dropout, train);
            let m = y.apply(&l.ln2).apply(&l.fc1).gelu("none").apply(&l.fc2);
            y = &y + m.dropout(self.dropout, train);
        }
        y.apply(&self.ln).apply(&self.head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

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
