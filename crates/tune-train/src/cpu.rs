//! What this CPU offers libtorch for bf16, read from `/proc/cpuinfo`.
//!
//! bf16 autocast speeds a CPU trial up only where libtorch has fast bf16 kernels: libtorch
//! sends bf16 matmuls and convolutions to oneDNN when the CPU has AVX-512 (bw, vl, dq), and
//! oneDNN computes in bf16 when it also has `avx512_bf16` or AMX. Without AVX-512, libtorch
//! falls back to kernels that convert every element, and bf16 is slower than fp32: on an
//! AVX2-only AMD EPYC the trainer's MLP ran 0.20× its fp32 speed (eager PyTorch 0.26×), where
//! an `avx512_bf16` machine had given 1.34× (docs/experiments/trainer-cpu.md, issue 31).
//!
//! What does not belong here: choosing a precision for the user (a trial runs the `amp` it was
//! given); this module only names what the hardware does with it.

use std::fmt;

/// How libtorch runs bf16 on this CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bf16Support {
    /// bf16 instructions (`avx512_bf16`, `amx_bf16`, or Arm's `bf16`): faster than fp32.
    Native,
    /// AVX-512 without bf16 instructions: oneDNN's kernels, converting in registers.
    Avx512,
    /// Neither (e.g. AVX2 only): libtorch's fallback kernels, slower than fp32.
    Slow,
    /// No CPU flags to read (not Linux, or an unreadable `/proc/cpuinfo`).
    Unknown,
}

impl fmt::Display for Bf16Support {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Bf16Support::Native => "native (bf16 instructions)",
            Bf16Support::Avx512 => "AVX-512 without bf16 instructions",
            Bf16Support::Slow => "emulated, slower than fp32 (no AVX-512)",
            Bf16Support::Unknown => "unknown (no CPU flags)",
        })
    }
}

/// The CPU's model name and its bf16 support.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuInfo {
    pub model: String,
    pub bf16: Bf16Support,
}

impl CpuInfo {
    /// This machine's CPU, from `/proc/cpuinfo`.
    pub fn this_machine() -> CpuInfo {
        match std::fs::read_to_string("/proc/cpuinfo") {
            Ok(text) => CpuInfo::parse(&text),
            Err(_) => CpuInfo {
                model: "unknown CPU".into(),
                bf16: Bf16Support::Unknown,
            },
        }
    }

    /// Reads the first processor's entry of a `/proc/cpuinfo` text (x86 `flags`, Arm
    /// `Features`).
    pub fn parse(cpuinfo: &str) -> CpuInfo {
        let field = |name: &str| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().to_string())
            })
        };
        let model = field("model name").unwrap_or_else(|| "unknown CPU".into());
        let bf16 = match (field("flags"), field("Features")) {
            (Some(flags), _) => {
                let has = |f: &str| flags.split_whitespace().any(|x| x == f);
                if has("avx512_bf16") || has("amx_bf16") {
                    Bf16Support::Native
                } else if has("avx512bw") && has("avx512vl") && has("avx512dq") {
                    Bf16Support::Avx512
                } else {
                    Bf16Support::Slow
                }
            }
            (None, Some(features)) if features.split_whitespace().any(|x| x == "bf16") => {
                Bf16Support::Native
            }
            (None, Some(_)) => Bf16Support::Slow,
            (None, None) => Bf16Support::Unknown,
        };
        CpuInfo { model, bf16 }
    }

    /// A note for the log of a CPU trial in bf16 where that is slower than fp32; `None`
    /// elsewhere.
    pub fn bf16_note(&self) -> Option<String> {
        (self.bf16 == Bf16Support::Slow).then(|| {
            format!(
                "note: amp = \"bf16\" on this CPU ({}) is emulated: without AVX-512 libtorch's \
                 bf16 kernels are slower than fp32 (amp = \"off\")",
                self.model
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn x86(flags: &str) -> String {
        format!(
            "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\nflags\t\t: {flags}\n\n\
             processor\t: 1\nmodel name\t: other\nflags\t\t: avx512_bf16\n"
        )
    }

    #[test]
    fn an_avx2_only_cpu_runs_bf16_slower_than_fp32_and_says_so_in_the_trial_log() {
        let cpu = CpuInfo::parse(&x86("fpu sse2 avx fma f16c avx2"));
        assert_eq!(cpu.model, "AMD EPYC");
        assert_eq!(cpu.bf16, Bf16Support::Slow);
        let note = cpu.bf16_note().expect("a note for the slow case");
        assert!(
            note.contains("AMD EPYC") && note.contains("slower than fp32"),
            "{note}"
        );
    }

    #[test]
    fn bf16_instructions_make_bf16_native_and_avx512_alone_does_not() {
        let native = CpuInfo::parse(&x86("avx2 avx512f avx512bw avx512vl avx512dq avx512_bf16"));
        assert_eq!(native.bf16, Bf16Support::Native);
        assert_eq!(native.bf16_note(), None);
        let amx = CpuInfo::parse(&x86("avx2 amx_bf16 amx_tile"));
        assert_eq!(amx.bf16, Bf16Support::Native);
        let avx512 = CpuInfo::parse(&x86("avx2 avx512f avx512bw avx512vl avx512dq"));
        assert_eq!(avx512.bf16, Bf16Support::Avx512);
        assert_eq!(avx512.bf16_note(), None);
        // AVX-512 foundation without bw/vl/dq (Knights Landing) is not enough for oneDNN.
        let knl = CpuInfo::parse(&x86("avx2 avx512f avx512cd"));
        assert_eq!(knl.bf16, Bf16Support::Slow);
    }

    #[test]
    fn arm_features_name_bf16_and_a_text_without_flags_is_unknown() {
        let arm = CpuInfo::parse("processor\t: 0\nFeatures\t: fp asimd bf16 sve\n");
        assert_eq!(arm.bf16, Bf16Support::Native);
        assert_eq!(arm.model, "unknown CPU");
        let old_arm = CpuInfo::parse("processor\t: 0\nFeatures\t: fp asimd\n");
        assert_eq!(old_arm.bf16, Bf16Support::Slow);
        let none = CpuInfo::parse("");
        assert_eq!(none.bf16, Bf16Support::Unknown);
        assert_eq!(none.bf16_note(), None);
    }
}
