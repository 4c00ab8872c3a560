"""The same request gives the same response bytes, whatever the interpreter's hash seed.

Set and dict iteration order over strings depends on PYTHONHASHSEED; a handler that lets it
leak into desired state would make Crossplane re-apply composed objects on every reconcile.
Every recorded request (tests/support/corpus.py), and four mutated variants of each (the same
in every child), are answered in child processes with different seeds, and the SHA-256 of each
response's deterministic serialisation must match.
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.schemas import ROOT

SEEDS = ("0", "1", "4242")
DIGESTS = """
import copy, hashlib, random
from crossplane.function import logging
from functions.server import run_function
from tests.support import corpus, fuzz
logging.configure(logging.Level.DISABLED)
chance = random.Random(7)  # the same mutations in every child: only the hash seed differs
for handler in corpus.handlers():
    for index, doc in enumerate(fuzz.documents_of(handler)):
        for variant in range(MUTATED + 1):
            changed = copy.deepcopy(doc)
            if variant:
                target = chance.randrange(len(fuzz.objects(changed)))
                where = list(fuzz.paths(fuzz.objects(changed)[target]))
                if where:
                    value = chance.choice(fuzz.HAZARDS)
                    fuzz.apply(changed, fuzz.Mutation(target, chance.choice(where), False, value))
            rsp = run_function(fuzz.request_of(changed))
            digest = hashlib.sha256(rsp.SerializeToString(deterministic=True)).hexdigest()
            print(handler, index, variant, digest)
"""
MUTATED = 4  # mutated variants of each recorded request, beside the request itself


def digests(seed: str) -> list[str]:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run(
        [sys.executable, "-c", f"MUTATED = {MUTATED}\n{DIGESTS}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_every_recorded_request_gets_the_same_bytes_under_every_hash_seed():
    first, *others = (digests(seed) for seed in SEEDS)
    assert len(first) >= 30 * (MUTATED + 1)  # every handler's recorded requests
    for other in others:
        assert other == first
