"""The tokens a random-weights LLM is held to in a whole-stack bench, so that its
answers are words and sentences that stage1 voices at a real answer's pace.

Random weights write runs of odd tokens (code fragments, emoji, CJK) with no
space or full stop for dozens of tokens: the clause splitter then waits for the
whole answer and Piper voices one long, strange clause, which is not what a
caller's answer costs (the first H200 run, docs/performance.md). Held to common
words, some punctuation and the end of turn, the answer has the shape of a
spoken one; its compute in the LLM is unchanged (the same model, the same
number of tokens), and stage0 applies the list with vLLM's allowed_token_ids
(`llm_allowed_tokens_file`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tokenizers import Tokenizer

# Words of short spoken answers; each is one token with its leading space in
# the Qwen2.5 and Llama 3 vocabularies (those that are not are left out).
WORDS = """
the a an and or but so of to in on at for with from by about as is are was were
be been it its this that these those there here what which who when where how
yes no not very more most some many much all any each every one two three four
five six seven ten first last next good great small big long short new old
right left best sure well also just only then now today time day night week
year way place city country world people person name home water sun sky blue
green red white light color food fruit apple dinner morning evening capital
paris france moon earth planet star river sea island mountain road town room
door book story music song game team friend family dog cat bird tree flower
can will would could should may might do does did have has had make made take
go goes went come see look know think say tell ask help give find keep call
open close start stop play read write eat cook walk talk
""".split()
# Punctuation that ends a clause or a sentence, alone or before a line break.
PUNCTUATION = re.compile(r" ?[.,!?;:]\n{0,2}")
END_OF_TURN = ("<|im_end|>", "<|eot_id|>")


def speakable_ids(tokenizer: Tokenizer) -> list[int]:
    """The ids of `WORDS` (with a leading space, either case), of the clause
    punctuation and of the end-of-turn token, ascending."""
    vocab = tokenizer.get_vocab()
    ids: set[int] = set()
    for word in WORDS:
        for form in (f" {word}", f" {word.capitalize()}"):
            pieces = tokenizer.encode(form, add_special_tokens=False).ids
            if len(pieces) == 1:
                ids.add(pieces[0])
    for token_id in vocab.values():
        if PUNCTUATION.fullmatch(tokenizer.decode([token_id])):
            ids.add(token_id)
    ids.update(vocab[t] for t in END_OF_TURN if t in vocab)
    return sorted(ids)


def write_speakable(folder: Path) -> Path:
    """`speakable_tokens.json` in a model folder, from its tokenizer.json."""
    ids = speakable_ids(Tokenizer.from_file(str(folder / "tokenizer.json")))
    path = folder / "speakable_tokens.json"
    path.write_text(json.dumps(ids))
    return path
