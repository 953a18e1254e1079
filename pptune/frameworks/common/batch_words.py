"""check-config's batch advice in the words of a file that counts its batch in tokens.

pptune prices a micro-batch as ``micro_batch_size`` sequences of ``seq_len`` tokens, and
check-config's findings say so ("micro-batch size 8 -> 2", "4 micro-batches of 1", "the
global batch 64 (micro-batch 8 x 4 x dp 2)"). A file whose framework has no micro-batch
size, only tokens (torchtitan main's dump: tokens a micro-batch a data-parallel rank,
micro-batches a pipeline run, tokens a step), gets that advice in its own keys and token
counts instead: its reader sets ``Semantics.batch_words`` (as ``Semantics.memory_fixes``
words the memory advice) and check/best.py and check/microbatches.py ask it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenBatch:
    """The keys of a token-counted batch and the values the file gives them."""

    micro: str  # the key of the tokens a micro-batch on each data-parallel rank
    count: str  # the key of the micro-batches a pipeline run (ignored without a pipeline)
    step: str  # the key of the tokens an optimizer step, over every data-parallel rank
    tokens: int  # the file's value of ``micro``
    seq_len: int  # the tokens of a sequence pptune prices (a micro-batch: k of them)
    size: int  # pptune's micro-batch size (sequences) of the file's ``tokens``

    def tokens_of(self, size: int) -> int:
        """The tokens of a micro-batch of ``size`` sequences: the file's own value at its
        own size (which pptune may price as a whole number of sequences above it)."""
        return self.tokens if size == self.size else size * self.seq_len

    def size_change(self, old: int, new: int) -> str:
        """slower-than-best's "micro-batch size a -> b"."""
        return f"{self.micro} {self.tokens_of(old)} -> {self.tokens_of(new)}"

    def plan(self, m: int, size: int, dp: int, pp: int) -> str:
        """A plan's ``m`` micro-batches of ``size`` sequences a step, with the key that
        states m: with a pipeline ``count``; without, the framework accumulates ``step`` /
        (``micro`` x dp) micro-batches, so ``step`` where m > 1 (the size change itself
        is ``size_change``'s)."""
        tokens = self.tokens_of(size)
        said = (f" ({self.count} {m})" if pp > 1 else
                f" ({self.step} {tokens * m * dp})" if m > 1 else "")
        return f"{m} micro-batch{'es' if m != 1 else ''} of {tokens} tokens{said}"

    def not_multiple(self, m: int, pp: int) -> str:
        """ga-not-aligned's opening: the pipeline run's count is not a multiple of pp."""
        return f"{self.count} {m} is not a multiple of pp ({pp}); "

    def step_made(self, m: int, runs: int, dp: int) -> str:
        """The tokens a step ``m`` micro-batches a run make (ga-not-aligned's fix)."""
        return (f", with {self.step} {self.tokens * m * runs * dp} ({self.micro} "
                f"{self.tokens} x {m}" + f" x {runs} runs a step" * (runs > 1)
                + f" x dp {dp})")
