"""The papers' claims (and our own findings) as rules over run records.

A claim is the paper's whole sentence; each part of it is its own rule with its own verdict.
A rule reads only :class:`rnnlab.ledger.records.Evidence` and returns a :class:`Finding`: what
the runs show (*holds*, *fails* or *undecided*), the values and the statistical test behind it
(``rnnlab.ledger.stats``: its p-value or interval is part of the text), and the groups of runs.

``verdict`` turns a finding into one of the ledger's classes, and is the only place that does:

* *confirmed* / *refuted*: every group of runs at its preset's budget and configuration (a
  variant preset is named in the verdict), at least ``FEW_SEEDS`` seeds per model (or the
  paper's own count when smaller: asRNN's copy and MNIST runs use one seed), and a test;
* *confirmed / refuted at the X protocol*: the same on runs at a protocol other than the
  paper's (``published.PROTOCOLS``: the authors' released code, or a cheaper one of ours). Only
  paper-protocol runs can confirm or refute the paper: these count apart (``verdict_kind``);
* *inconclusive (reasons)*: otherwise (reduced budget, too few seeds, no significant
  difference, no test possible, one setting tested of a claim "for any hyperparameters"), with
  what the runs so far point to;
* *not applicable (premise fails: ...)*: a theorem whose premise does not hold on the runs
  makes no prediction there;
* *untested*: the runs the rule needs are not in the records.

A claim's overall verdict: *confirmed* when every part is, *refuted* when a part is
(*refuted in part* when another is not), *untested* when no part was tested, *not applicable*
when the premise fails, else *inconclusive*.
"""

from __future__ import annotations

from .findings import (
    CONFIRMED,
    DEPENDS,
    FAILS,
    FEW_SEEDS,
    HOLDS,
    INCONCLUSIVE,
    NOT_APPLICABLE,
    NOT_REPRODUCED,
    OTHER_PROTOCOL,
    REFUTED,
    UNDECIDED,
    UNTESTED,
    Claim,
    Finding,
    Part,
    compare,
    level,
    needed,
    protocols_of,
    runs_text,
    test_items,
    verdict,
    verdict_kind,
    within,
)
from .rules import (
    HIGH,
    LOW,
    _one,
    asrnn_conclusion,
    asrnn_conditions,
    asrnn_s_stuck,
    at_baseline,
    at_chance,
    beats,
    dmu_about_half,
    dmu_ahead,
    dmu_faster,
    dmu_most_reach_all,
    dmu_never,
    dmu_partial,
    dmu_similar,
    loss_below_baseline,
    loss_level,
    loss_not_below_baseline,
    nnrnn_schur,
    not_solves_copy,
    solves_copy,
)

__all__ = [
    "CONFIRMED",
    "DEPENDS",
    "FAILS",
    "HOLDS",
    "INCONCLUSIVE",
    "REFUTED",
    "UNDECIDED",
    "UNTESTED",
    "CLAIMS",
    "Claim",
    "FEW_SEEDS",
    "Finding",
    "HIGH",
    "LOW",
    "NOT_APPLICABLE",
    "NOT_REPRODUCED",
    "OTHER_PROTOCOL",
    "Part",
    "asrnn_conclusion",
    "asrnn_conditions",
    "asrnn_s_stuck",
    "at_baseline",
    "at_chance",
    "beats",
    "compare",
    "dmu_about_half",
    "dmu_ahead",
    "dmu_faster",
    "dmu_most_reach_all",
    "dmu_never",
    "dmu_partial",
    "dmu_similar",
    "level",
    "loss_below_baseline",
    "loss_not_below_baseline",
    "needed",
    "nnrnn_schur",
    "not_solves_copy",
    "protocols_of",
    "runs_text",
    "solves_copy",
    "test_items",
    "verdict",
    "verdict_kind",
    "within",
]


# --- the claims ------------------------------------------------------------------------------
def _ptb(model: str) -> str:
    return {
        "LSTM": "asrnn/ptb_char-bptt150-lstm",
        "asRNN": "asrnn/ptb_char-bptt150",
        "expRNN": "asrnn/ptb_char-bptt150-exprnn",
        "EURNN": "asrnn/ptb_char-bptt150-eurnn",
        "nnRNN": "nnrnn/ptb-bptt150",
        "RNN-orth": "nnrnn/ptb-bptt150-rnn-orth",
        "RNN": "nnrnn/ptb-bptt150-rnn",
    }[model]


CLAIMS: list[Claim] = [
    # asRNN
    Claim(
        "asrnn",
        "Fig. 2, Sec. 3",
        "asRNN shows excellent performance by converging stably on the Copy task (Fig. 2: L=1000, training loss to ~0)",
        (Part("solves copy L=1000", solves_copy("asrnn/copy-L1000", variants=False)),),
        runs=1,
        # Fig. 2's asRNN curve is the released copytask.py's run: its defaults (eps 1e-5, W_hh lr
        # 2e-5: asrnn/copy-L1000-code), where Table 5 prints 2e-5 and 1e-4 (asrnn/copy-L1000)
        headline="code",
    ),
    Claim(
        "asrnn",
        "Fig. 2",
        "asRNN beats the LSTM on copy at L=1000",
        (
            Part(
                "asRNN ahead of the LSTM (recall accuracy)",
                beats("asrnn/copy-L1000", "asrnn/copy-L1000-lstm", "test/recall_accuracy", True),
            ),
        ),
        runs=1,
    ),
    Claim(
        "asrnn",
        "Fig. 1a",
        "asRNN beats the LSTM on copy at L=2000",
        (
            Part(
                "asRNN ahead of the LSTM (recall accuracy)",
                beats("asrnn/copy-L2000", "asrnn/copy-L2000-lstm", "test/recall_accuracy", True),
            ),
        ),
        runs=1,
    ),
    Claim(
        "asrnn",
        "Fig. 1b-c, Sec. 3",
        "asRNN achieves better generalization on the sequential and permuted MNIST tasks (n=122 budget)",
        (
            Part(
                "sMNIST: asRNN ahead of expRNN",
                beats("asrnn/smnist-n122", "asrnn/smnist-n122-exprnn", "test/accuracy", True),
            ),
            Part(
                "sMNIST: asRNN ahead of the LSTM",
                beats("asrnn/smnist-n122", "asrnn/smnist-n122-lstm", "test/accuracy", True),
            ),
            Part(
                "pMNIST: asRNN ahead of expRNN",
                beats("asrnn/psmnist-n122", "asrnn/psmnist-n122-exprnn", "test/accuracy", True),
            ),
            Part(
                "pMNIST: asRNN ahead of the LSTM",
                beats("asrnn/psmnist-n122", "asrnn/psmnist-n122-lstm", "test/accuracy", True),
            ),
        ),
        runs=1,
    ),
    Claim(
        "asrnn",
        "Table 1, Sec. 3",
        "On the PTB task, asRNN achieved encouraging results by outperforming all "
        "orthogonal RNN baselines, only second to LSTM (T=150; Table 1's baselines: nnRNN, expRNN, EURNN, "
        "RNN-orth, RNN)",
        (
            Part("the LSTM ahead of asRNN", beats(_ptb("LSTM"), _ptb("asRNN"), "test/bpc", False)),
            *(
                Part(f"asRNN ahead of {m}", beats(_ptb("asRNN"), _ptb(m), "test/bpc", False))
                for m in ("nnRNN", "expRNN", "EURNN", "RNN-orth", "RNN")
            ),
        ),
        runs=5,
    ),
    Claim(
        "asrnn",
        "ours",
        "Finding: on copy L=1000, at equal steps, expRNN and scoRNN reach a higher recall "
        "accuracy than asRNN with the paper's Table 5 values",
        (
            Part(
                "expRNN ahead of asRNN",
                beats("asrnn/copy-L1000-exprnn", "asrnn/copy-L1000", "test/recall_accuracy", True),
            ),
            Part(
                "scoRNN ahead of asRNN",
                beats("asrnn/copy-L1000-scornn", "asrnn/copy-L1000", "test/recall_accuracy", True),
            ),
        ),
        runs=1,
        ours=True,
    ),
    Claim(
        "asrnn",
        "ours",
        "Finding: the copy setting a = b = 0 leaves s at 0, so D_f stays eps I",
        (Part("D_f = eps I in the trained model", asrnn_s_stuck),),
        runs=1,
        ours=True,
    ),
    Claim(
        "asrnn",
        "Theorem 2.1",
        "Under its conditions, sigma_min(J(t2, t1)) >= 1",
        (Part("the conclusion holds there approximately (sigma_min >= 0.999)", asrnn_conclusion),),
        runs=1,
        premise=Part("its conditions hold on a trained copy model", asrnn_conditions),
    ),
    # nnRNN
    Claim(
        "nnrnn",
        "Fig. 2, Sec. 5.1",
        "Copy (T=200): the LSTM struggled to solve the task and RNN failed completely, "
        "unlike all orthogonal RNNs who learn to solve at very high performance very quickly; the nnRNN matched "
        "the performance of orthogonal RNNs (solved: test loss below 10% of the 0.095 baseline)",
        (
            Part("nnRNN solves it", loss_below_baseline("nnrnn/copy", 0.1, "solved")),
            Part("expRNN solves it", loss_below_baseline("nnrnn/copy-exprnn", 0.1, "solved")),
            Part("RNN-orth (orthogonal init) solves it", loss_below_baseline("nnrnn/copy-rnn-orth", 0.1, "solved")),
            Part("the LSTM does not solve it", loss_not_below_baseline("nnrnn/copy-lstm", 0.1, "solved")),
            Part("the RNN stays at the baseline (within 10%)", at_baseline("nnrnn/copy-rnn", 0.1)),
        ),
    ),
    Claim(
        "nnrnn",
        "Fig. 3",
        "Trained on copy, nnRNN's eigenvalue moduli go to about 1 and its T to about 0",
        (
            Part(
                "mean eigenvalue modulus within 0.01 of 1",
                nnrnn_schur("gamma_mean", lambda v: abs(v - 1) <= 0.01, "paper ~1; tolerance 0.01"),
            ),
            Part(
                "T about 0 (departure from normality <= 0.05)",
                nnrnn_schur("departure_from_normality", lambda v: v <= 0.05, "paper: T ~ 0; tolerance 0.05"),
            ),
        ),
    ),
    Claim(
        "nnrnn",
        "Table 1, Sec. 5.2",
        "The performance gap to expRNN is modest for equal number of parameters and "
        "T=150, it appreciatively improves for T=300; where the nnRNN shines is for equal numbers of hidden units",
        (
            Part(
                "T=150, equal parameters: nnRNN ahead of expRNN",
                beats("nnrnn/ptb-bptt150", "nnrnn/ptb-bptt150-exprnn", "test/bpc", False),
            ),
            Part(
                "T=300, equal parameters: nnRNN ahead of expRNN",
                beats("nnrnn/ptb-bptt300", "nnrnn/ptb-bptt300-exprnn", "test/bpc", False),
            ),
            Part(
                "T=150, equal hidden units (N=1024): nnRNN ahead of expRNN",
                beats("nnrnn/ptb-bptt150", "nnrnn/ptb-bptt150-exprnn-n1024", "test/bpc", False),
            ),
        ),
    ),
    # DMU
    Claim(
        "dmu",
        "Fig. 3, Sec. IV-A",
        "Adding: DMU significantly outperforms all other modules, and GRU scores better "
        "than LSTM. RNN and RHN are not able to reach any threshold within 100 training epochs for any "
        "hyperparameters",
        (
            *(Part(f"DMU ahead of {m.upper()}", dmu_ahead("adding", "dmu", m)) for m in ("rnn", "lstm", "gru", "rhn")),
            Part("GRU ahead of LSTM", dmu_ahead("adding", "gru", "lstm")),
            *(
                Part(
                    f"{m.upper()} reaches no threshold, for any hyperparameters",
                    dmu_never("adding", m),
                    any_setting=True,
                    sweep="dmu-adding-any-lr",
                )
                for m in ("rnn", "rhn")
            ),
        ),
        runs=51,
        headline="code",
    ),
    Claim(
        "dmu",
        "Fig. 4, Sec. IV-B",
        "Temporal order: DMU has faster convergence than GRU and maintains similar "
        "results for high thresholds (up to 1e-4). For lower thresholds, DMU outperforms GRU. LSTM reaches partial "
        "success on higher thresholds but fails for lower ones. RNN and RHN fail for all thresholds",
        (
            Part("DMU converges faster than GRU", dmu_faster("temporal_order", "dmu", "gru")),
            Part("DMU and GRU similar down to 1e-4", dmu_similar("temporal_order", "dmu", "gru", HIGH)),
            Part("DMU ahead of GRU at 1e-5 and 1e-6", dmu_ahead("temporal_order", "dmu", "gru", LOW)),
            Part("LSTM: partial success down to 1e-4", dmu_partial("temporal_order", "lstm")),
            Part("LSTM: no run reaches 1e-5", dmu_never("temporal_order", "lstm", LOW)),
            Part("RNN reaches no threshold", dmu_never("temporal_order", "rnn")),
            Part("RHN reaches no threshold", dmu_never("temporal_order", "rhn")),
        ),
        runs=51,
        headline="code",
    ),
    Claim(
        "dmu",
        "Fig. 5, Sec. IV-C",
        "Noisy sequence: GRU and DMU obtain similar results, in most cases reaching all "
        "the loss thresholds, with GRU training faster. RHN in about half of the cases does not reach any threshold, "
        "and in the other half, it reaches all of them. RNN performs worse than RHN, and LSTM performs worse than RNN",
        (
            Part("GRU and DMU similar", dmu_similar("noisy_sequence", "gru", "dmu")),
            Part("GRU: most runs reach every threshold", dmu_most_reach_all("noisy_sequence", "gru")),
            Part("DMU: most runs reach every threshold", dmu_most_reach_all("noisy_sequence", "dmu")),
            Part("GRU trains faster than DMU", dmu_faster("noisy_sequence", "gru", "dmu")),
            Part("RHN: about half reach none, half all", dmu_about_half("noisy_sequence", "rhn")),
            Part("RHN ahead of RNN", dmu_ahead("noisy_sequence", "rhn", "rnn")),
            Part("RNN ahead of LSTM", dmu_ahead("noisy_sequence", "rnn", "lstm")),
        ),
        runs=51,
        headline="code",
    ),
    Claim(
        "dmu",
        "Table I, Sec. IV-D",
        "PolyMusic: DMU outperforms RHN at 3 out of 4 depths with regard to test mean "
        "loss (Table I: RHN ahead at depth 1, DMU at 2, 5 and 10)",
        (
            Part("depth 1: RHN ahead of DMU", beats("dmu/polymusic-N1-rhn", "dmu/polymusic-N1-dmu", "test/nll", False)),
            *(
                Part(
                    f"depth {n}: DMU ahead of RHN",
                    beats(f"dmu/polymusic-N{n}-dmu", f"dmu/polymusic-N{n}-rhn", "test/nll", False),
                )
                for n in (2, 5, 10)
            ),
        ),
        runs=5,
    ),
    Claim(
        "dmu",
        "Tables V-VII, Sec. V-C",
        "The results confirm that efficiency benefits from reducing the learning "
        "rate of the DMU module (NatLang depth 5 tested here)",
        (
            Part(
                "NatLang N=5: DMU (lr/(2n)) ahead of DMU-C (one rate)",
                beats("dmu/natlang-N5-dmu", "dmu/natlang-N5-dmuc", "test/perplexity", False),
            ),
        ),
        runs=5,
    ),
    # Henaff et al.
    Claim(
        "henaff",
        "Fig. 2, Sec. 4.1",
        "LT-ORNN solves fixed-length copy almost immediately, while LT-IRNN does not",
        (
            Part(
                "LT-ORNN solves copy (first timescale; ours T=500)",
                solves_copy("henaff/copy-ltornn"),
                says="works",
                sweep="henaff-copy-T500-screen",
            ),
            Part(
                "LT-IRNN does not", not_solves_copy("henaff/copy-ltirnn"), says="fails", sweep="henaff-copy-T500-screen"
            ),
        ),
    ),
    Claim(
        "henaff",
        "Fig. 2, Sec. 4.1",
        "The same at T=750, one run of each",
        (
            Part(
                "LT-ORNN solves copy at T=750",
                solves_copy("henaff/copy-ltornn-T750"),
                says="works",
                sweep="henaff-copy-T750-screen",
            ),
            Part(
                "LT-IRNN does not",
                not_solves_copy("henaff/copy-ltirnn-T750"),
                says="fails",
                sweep="henaff-copy-T750-screen",
            ),
        ),
        runs=1,
    ),
    Claim(
        "henaff",
        "Fig. 3, Sec. 4.1",
        "On addition, LT-IRNN solves efficiently, whereas LT-ORNN may take much "
        "longer or fail (solved: test MSE < 0.01)",
        (
            Part(
                "LT-IRNN solves adding (first timescale; ours T=500)",
                loss_level("henaff/adding-ltirnn", 0.01, "solved"),
                says="works",
                sweep="henaff-adding-T500-screen",
            ),
            Part("LT-ORNN behind LT-IRNN", beats("henaff/adding-ltirnn", "henaff/adding-ltornn", "test/loss", False)),
        ),
    ),
    Claim(
        "henaff",
        "Fig. 4, Sec. 4.2",
        "Pooling lets LT-ORNN solve copy at both tested timescales and approximately "
        "solve addition (approximately: test MSE below 10% of the predict-the-mean baseline)",
        (
            Part(
                "LT-ORNN + pooling solves copy (first timescale)",
                solves_copy("henaff/copy-ltornn-pool"),
                says="works",
                sweep="henaff-pool-T500-screen",
            ),
            Part(
                "LT-ORNN + pooling solves copy at T=750",
                solves_copy("henaff/copy-ltornn-pool-T750"),
                says="works",
                sweep="henaff-pool-T750-screen",
            ),
            Part(
                "LT-ORNN + pooling approximately solves adding (first timescale)",
                loss_below_baseline("henaff/adding-ltornn-pool", 0.1, "approximately solved"),
                says="works",
                sweep="henaff-pool-T500-screen",
            ),
            # Fig. 4 shows adding at both timescales, and the sentence does not limit "addition" to one
            Part(
                "LT-ORNN + pooling approximately solves adding at T=750",
                loss_below_baseline("henaff/adding-ltornn-pool-T750", 0.1, "approximately solved"),
                says="works",
                sweep="henaff-pool-T750-screen",
            ),
        ),
    ),
    Claim(
        "henaff",
        "Fig. 5, Sec. 4.3",
        "On variable-length copy at T = 100, none of the tested LT-RNNs beat chance, "
        "while the LSTM solves the task slowly",
        (
            Part(
                "LT-ORNN at chance (within 0.05 of 1/8)",
                at_chance("henaff/copy_variable-ltornn", 1 / 8, 0.05),
                says="fails",
                sweep="henaff-copy_variable-screen",
            ),
            Part(
                "LT-IRNN at chance (within 0.05 of 1/8)",
                at_chance("henaff/copy_variable-ltirnn", 1 / 8, 0.05),
                says="fails",
                sweep="henaff-copy_variable-screen",
            ),
            # the text gives no number of steps for Fig. 5: the verdict holds at the preset's
            # budget, which the evidence column states
            Part(
                "the LSTM solves it (within the preset's budget: the text gives none)",
                solves_copy("henaff/copy_variable-lstm"),
                says="works",
                sweep="henaff-copy_variable-lstm-screen",
            ),
        ),
    ),
    # coRNN and LEM (their psMNIST results)
    Claim(
        "cornn",
        "Abstract, psMNIST",
        "Experiments show that the proposed RNN is comparable in performance to the "
        "state of the art on a variety of benchmarks (psMNIST tested here: within 1% of the paper's 97.34%)",
        (
            Part(
                "coRNN's psMNIST accuracy within 1% of 97.34%",
                _one("cornn/psmnist", lambda g: within(g, "test/accuracy", 0.9734, 0.01, "the paper's accuracy")),
            ),
        ),
        runs=1,
    ),
    Claim(
        "lem",
        "Abstract, psMNIST",
        "LEM outperforms state-of-the-art recurrent neural networks, gated recurrent "
        "units, and long short-term memory models (psMNIST tested here: against the LSTM baseline of the DMU "
        "paper's Table IV, N=128 both)",
        (Part("LEM ahead of the LSTM on psMNIST", beats("lem/psmnist", "dmu/psmnist-lstm", "test/accuracy", True)),),
        runs=1,
    ),
]
