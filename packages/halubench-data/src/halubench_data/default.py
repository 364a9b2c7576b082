"""The embedded default dataset: synthetic reports with controlled hallucinations, no download.

Design (why answer-only baselines cannot solve it). Contexts come in *families* of two sibling
reports that share a template and all facts but the ones asked about. For each question, each
sibling's faithful answer is also asked against the other sibling, where it is hallucinated. Every
answer string therefore occurs exactly once as faithful and once as hallucinated within a family,
and a family is one group (never split). On any split, the answers with label 0 and with label 1
are the same multiset of strings: any score computed from the answer alone (its length, TF-IDF,
anything) has AUROC exactly 0.5.

Kinds (``Example.meta["kind"]``): faithful ``paraphrase``, ``partial`` (answers one part of a
two-part question) and ``refusal`` (the report lacks the answer and says so); hallucinated
``changed_number``, ``swapped_entity``, ``reversed_finding``, ``unsupported_detail`` (a detail the
report does not contain), ``wrong_arithmetic`` (a wrong sum over two numbers in the report) and
``false_refusal`` (claims the report lacks a fact it states).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .dataset import Dataset, LoadReport
from .leakage import assign_splits
from .schema import SPLITS, Example, Span

FIRST = (
    "Mara Tomas Ines Kofi Lena Ravi Elsa Jonas Amir Petra Noor Hugo Dalia Felix Sana Oskar Yara Ivo".split()
)
LAST = (
    "Olsen Reyes Varga Mensah Lindqvist Iyer Novak Brandt Haddad Kowal Osei Marchetti Tan Ruiz Sato Berg"
).split()
PLACES = "Lyon Tromso Ghent Porto Graz Aarhus Bergen Turku Brno Malmo Utrecht Cork".split()
MONTHS = "January February March April May June July August September October November December".split()


def _person(r: random.Random) -> str:
    return f"{r.choice(FIRST)} {r.choice(LAST)}"


@dataclass(frozen=True)
class _QType:
    """One question type: how to draw a contrasting pair of values and render them."""

    name: str
    draw: Callable[[random.Random, dict[str, Any]], tuple[Any, Any]]
    sentence: Callable[[dict[str, Any], Any], str]
    question: Callable[[dict[str, Any]], str]
    answers: tuple[Callable[[dict[str, Any], Any], str], ...]
    faithful_kind: str
    hallucinated_kind: str


def _distinct(r: random.Random, pick: Callable[[], Any]) -> tuple[Any, Any]:
    a = pick()
    b = pick()
    while b == a:
        b = pick()
    return a, b


def _sums(r: random.Random, lo: int, hi: int) -> tuple[tuple[int, int], tuple[int, int]]:
    a = (r.randint(lo, hi), r.randint(lo, hi))
    b = (r.randint(lo, hi), r.randint(lo, hi))
    while sum(b) == sum(a) or set(a) & set(b):
        b = (r.randint(lo, hi), r.randint(lo, hi))
    return a, b


def _maybe(r: random.Random, pick: Callable[[], Any]) -> tuple[Any, Any]:
    pair = (None, pick())
    return pair if r.random() < 0.5 else (pair[1], pair[0])


def _bool_pair(r: random.Random, _: dict[str, Any]) -> tuple[bool, bool]:
    return (True, False) if r.random() < 0.5 else (False, True)


_DETAILS = (
    ("with room for 40 trucks", "has room for 40 trucks"),
    ("funded by a regional grant", "was funded by a regional grant"),
    ("staffed by 120 workers", "is staffed by 120 workers"),
    ("powered by rooftop solar panels", "is powered by rooftop solar panels"),
    ("built on a former rail yard", "stands on a former rail yard"),
)

COMPANY = (
    _QType(
        "growth",
        lambda r, f: _distinct(r, lambda: r.randint(3, 39)),
        lambda f, v: f"Its revenue grew by {v}% to {f['rev']} million euros.",
        lambda f: f"By what percentage did {f['name']}'s revenue grow in {f['year']}?",
        (lambda f, v: f"Revenue grew by {v}%.", lambda f, v: f"It rose {v} percent over the year."),
        "paraphrase",
        "changed_number",
    ),
    _QType(
        "ceo",
        lambda r, f: _distinct(r, lambda: _person(r)),
        lambda f, v: f"The company is led by chief executive {v}.",
        lambda f: f"Who leads {f['name']}?",
        (lambda f, v: f"{v} leads the company.", lambda f, v: f"The chief executive is {v}."),
        "paraphrase",
        "swapped_entity",
    ),
    _QType(
        "target",
        _bool_pair,
        lambda f, v: (
            f"Sales of the {f['product']} {'beat' if v else 'fell short of'} the target set in January."
        ),
        lambda f: f"Did sales of the {f['product']} reach the company's target?",
        (
            lambda f, v: "Yes, they beat the target." if v else "No, they fell short of it.",
            lambda f, v: "Yes, sales exceeded the goal." if v else "No, sales missed the goal.",
        ),
        "paraphrase",
        "reversed_finding",
    ),
    _QType(
        "units",
        lambda r, f: _sums(r, 120, 480),
        lambda f, v: f"It shipped {v[0]} units in the first quarter and {v[1]} units in the second.",
        lambda f: f"How many units did {f['name']} ship in the first two quarters combined?",
        (lambda f, v: f"{sum(v)} units in total.", lambda f, v: f"Together, {sum(v)} units were shipped."),
        "paraphrase",
        "wrong_arithmetic",
    ),
    _QType(
        "warehouse",
        lambda r, f: _distinct(r, lambda: r.randrange(len(_DETAILS))),
        lambda f, v: f"A new warehouse opened in {f['place']}; it {_DETAILS[v][1]}.",
        lambda f: "What does the report say about the new warehouse?",
        (
            lambda f, v: f"A warehouse opened in {f['place']}, {_DETAILS[v][0]}.",
            lambda f, v: f"It opened a warehouse in {f['place']} {_DETAILS[v][0]}.",
        ),
        "paraphrase",
        "unsupported_detail",
    ),
    _QType(
        "staff",
        lambda r, f: _maybe(r, lambda: r.randint(60, 900)),
        lambda f, v: "" if v is None else f"It employs {v} people.",
        lambda f: f"How many people does {f['name']} employ?",
        (
            lambda f, v: "The report does not say." if v is None else f"It employs {v} people.",
            lambda f, v: "No staff number is given." if v is None else f"{f['name']} has {v} employees.",
        ),
        "paraphrase",
        "unsupported_detail",
    ),
    _QType(
        "founded",
        lambda r, f: _distinct(r, lambda: r.randint(1950, 2015)),
        lambda f, v: f"Founded in {v}, the firm is based in {f['hq']}.",
        lambda f: f"When was {f['name']} founded, and where is it based?",
        (lambda f, v: f"It was founded in {v}.", lambda f, v: f"The firm dates from {v}."),
        "partial",
        "changed_number",
    ),
)

_PARK = (
    ("with a public swimming pool", "now has a public swimming pool"),
    ("designed by local students", "was designed by local students"),
    ("that stays open at night", "stays open at night"),
    ("paid for by a lottery fund", "was paid for by a lottery fund"),
    ("with a small museum", "now holds a small museum"),
)

CITY = (
    _QType(
        "population",
        lambda r, f: _distinct(r, lambda: r.randint(12, 95) * 1000),
        lambda f, v: f"The town now has {v:,} residents.",
        lambda f: f"How many residents does {f['name']} have?",
        (lambda f, v: f"It has {v:,} residents.", lambda f, v: f"About {v:,} people live there."),
        "paraphrase",
        "changed_number",
    ),
    _QType(
        "mayor",
        lambda r, f: _distinct(r, lambda: _person(r)),
        lambda f, v: f"The council is chaired by mayor {v}.",
        lambda f: f"Who is the mayor of {f['name']}?",
        (lambda f, v: f"The mayor is {v}.", lambda f, v: f"{v} serves as mayor."),
        "paraphrase",
        "swapped_entity",
    ),
    _QType(
        "tram",
        _bool_pair,
        lambda f, v: (
            f"A survey found that the new tram line {'reduced' if v else 'did not reduce'} car traffic."
        ),
        lambda f: "Did the new tram line reduce car traffic?",
        (
            lambda f, v: "Yes, traffic went down." if v else "No, traffic did not go down.",
            lambda f, v: "Yes, it cut car traffic." if v else "No, it left car traffic unchanged.",
        ),
        "paraphrase",
        "reversed_finding",
    ),
    _QType(
        "trees",
        lambda r, f: _sums(r, 40, 400),
        lambda f, v: f"Crews planted {v[0]} trees in spring and {v[1]} in autumn.",
        lambda f: f"How many trees were planted in {f['name']} over the year?",
        (lambda f, v: f"{sum(v)} trees were planted.", lambda f, v: f"In total, {sum(v)} trees."),
        "paraphrase",
        "wrong_arithmetic",
    ),
    _QType(
        "harbour",
        lambda r, f: _distinct(r, lambda: r.randrange(len(_PARK))),
        lambda f, v: f"The old harbour became a park, which {_PARK[v][1]}.",
        lambda f: "What happened to the old harbour?",
        (
            lambda f, v: f"It became a park {_PARK[v][0]}.",
            lambda f, v: f"The harbour was turned into a park {_PARK[v][0]}.",
        ),
        "paraphrase",
        "unsupported_detail",
    ),
    _QType(
        "budget",
        lambda r, f: _maybe(r, lambda: r.randint(20, 300)),
        lambda f, v: "" if v is None else f"Its annual budget is {v} million euros.",
        lambda f: f"What is the annual budget of {f['name']}?",
        (
            lambda f, v: "The report does not give it." if v is None else f"It is {v} million euros.",
            lambda f, v: "No budget figure is given." if v is None else f"The budget is {v} million euros.",
        ),
        "paraphrase",
        "unsupported_detail",
    ),
    _QType(
        "festival",
        lambda r, f: _distinct(r, lambda: r.choice(MONTHS)),
        lambda f, v: f"Its music festival takes place in {v} and draws {f['visitors']} visitors.",
        lambda f: "When is the music festival held, and how many visitors does it draw?",
        (lambda f, v: f"It is held in {v}.", lambda f, v: f"The festival takes place in {v}."),
        "partial",
        "swapped_entity",
    ),
)

_STORAGE = (
    ("for six weeks", "for six weeks"),
    ("under dry nitrogen", "under dry nitrogen"),
    ("at minus 20 degrees", "at minus 20 degrees"),
    ("in sealed glass jars", "in sealed glass jars"),
    ("away from daylight", "away from daylight"),
)

STUDY = (
    _QType(
        "enrolled",
        lambda r, f: _distinct(r, lambda: r.randint(24, 480)),
        lambda f, v: f"The trial enrolled {v} volunteers.",
        lambda f: "How many volunteers took part in the trial?",
        (lambda f, v: f"{v} volunteers took part.", lambda f, v: f"The trial had {v} participants."),
        "paraphrase",
        "changed_number",
    ),
    _QType(
        "lead",
        lambda r, f: _distinct(r, lambda: _person(r)),
        lambda f, v: f"The work was led by {v} of the {f['institute']}.",
        lambda f: "Who led the study?",
        (lambda f, v: f"It was led by {v}.", lambda f, v: f"{v} led the work."),
        "paraphrase",
        "swapped_entity",
    ),
    _QType(
        "effect",
        _bool_pair,
        lambda f, v: (
            f"The {f['compound']} coating {'reduced' if v else 'did not reduce'} corrosion on steel plates."
        ),
        lambda f: f"Did the {f['compound']} coating reduce corrosion?",
        (
            lambda f, v: "Yes, it reduced corrosion." if v else "No, it did not reduce corrosion.",
            lambda f, v: "Yes, corrosion was lower." if v else "No, corrosion was not lower.",
        ),
        "paraphrase",
        "reversed_finding",
    ),
    _QType(
        "samples",
        lambda r, f: _sums(r, 12, 160),
        lambda f, v: f"{v[0]} plates were tested at room temperature and {v[1]} at high temperature.",
        lambda f: "How many plates were tested in total?",
        (lambda f, v: f"{sum(v)} plates were tested.", lambda f, v: f"A total of {sum(v)} plates."),
        "paraphrase",
        "wrong_arithmetic",
    ),
    _QType(
        "storage",
        lambda r, f: _distinct(r, lambda: r.randrange(len(_STORAGE))),
        lambda f, v: f"Before testing, the plates were kept {_STORAGE[v][1]}.",
        lambda f: "How were the plates stored before testing?",
        (
            lambda f, v: f"They were kept {_STORAGE[v][0]}.",
            lambda f, v: f"The plates were stored {_STORAGE[v][0]}.",
        ),
        "paraphrase",
        "unsupported_detail",
    ),
    _QType(
        "funding",
        lambda r, f: _maybe(r, lambda: r.randint(40, 900)),
        lambda f, v: "" if v is None else f"The project received {v} thousand dollars.",
        lambda f: "How much funding did the project receive?",
        (
            lambda f, v: "The report does not say." if v is None else f"It received {v} thousand dollars.",
            lambda f, v: "No amount is given." if v is None else f"It got {v} thousand dollars.",
        ),
        "paraphrase",
        "unsupported_detail",
    ),
    _QType(
        "journal",
        lambda r, f: _distinct(r, lambda: r.choice(JOURNALS)),
        lambda f, v: f"The results appeared in {f['month']} in the journal {v}.",
        lambda f: "When and where were the results published?",
        (lambda f, v: f"They appeared in {v}.", lambda f, v: f"The journal was {v}."),
        "partial",
        "swapped_entity",
    ),
)

JOURNALS: list[str] = (
    "Corrosion Letters|Applied Surfaces|Materials Today Notes|Metal Science Review|Coatings Journal".split(
        "|"
    )
)

COMPANY_NAMES = (
    "Norvale Brightwater Kestrel Halden Corvex Lumina Stonebrook Veltra Ashgrove Quillon Tarrow Fenmark"
).split()
COMPANY_KINDS = "Systems|Foods|Logistics|Textiles|Robotics|Paper Mills".split("|")
PRODUCTS = "water filter|cargo bike|heat pump|desk lamp|soil sensor|travel kettle".split("|")
TOWNS = "Port Elmsby|Westbrook|Lindenfall|Marrowgate|Oakhaven|Silverdale|Crowmere|Fairhollow".split("|")
RIVERS = "Alder Wend Cray Lusk Teme Orrin".split()
INSTITUTES = "Halvorsen Institute|North Coast Polytechnic|Brennan Materials Lab|Eastmoor University".split(
    "|"
)
COMPOUNDS = "zinc phosphate|graphene oxide|silica gel|epoxy resin|ceramic".split("|")

FILLERS = {
    "company": (
        "Analysts described the year as steady.",
        "The board plans to review its prices next spring.",
        "Most of its customers are small shops.",
        "Shipping costs stayed close to last year's level.",
        "A new website went live in the autumn.",
    ),
    "city": (
        "Cycling lanes were repainted along the main road.",
        "The weekly market still draws crowds on Saturdays.",
        "Several schools extended their opening hours.",
        "A new bus timetable started in the summer.",
        "Local shops reported a busy holiday season.",
    ),
    "study": (
        "The plates were cut from one batch of steel.",
        "Each plate was weighed before and after exposure.",
        "The salt spray followed a standard protocol.",
        "Two technicians checked every measurement.",
        "The authors plan a longer follow-up trial.",
    ),
}


def _company(r: random.Random) -> tuple[dict[str, Any], str]:
    f = {
        "name": f"{r.choice(COMPANY_NAMES)} {r.choice(COMPANY_KINDS)}",
        "year": r.randint(2016, 2023),
        "rev": r.randint(5, 90),
        "product": r.choice(PRODUCTS),
        "place": r.choice(PLACES),
        "hq": r.choice(PLACES),
    }
    return f, f"{f['name']} published its annual report for {f['year']}, a year of change for the firm."


def _city(r: random.Random) -> tuple[dict[str, Any], str]:
    f = {"name": r.choice(TOWNS), "year": r.randint(2016, 2023), "visitors": f"{r.randint(3, 40)},000"}
    return f, f"This is the {f['year']} profile of {f['name']}, a town on the {r.choice(RIVERS)} river."


def _study(r: random.Random) -> tuple[dict[str, Any], str]:
    f = {"institute": r.choice(INSTITUTES), "compound": r.choice(COMPOUNDS), "month": r.choice(MONTHS)}
    return f, f"A new report describes a trial of a {f['compound']} coating run at the {f['institute']}."


DOMAINS: dict[str, tuple[Callable[[random.Random], tuple[dict[str, Any], str]], tuple[_QType, ...]]] = {
    "company": (_company, COMPANY),
    "city": (_city, CITY),
    "study": (_study, STUDY),
}


def _context(r: random.Random, domain: str, intro: str, facts: dict[str, Any], values: dict[str, Any]) -> str:
    qtypes = DOMAINS[domain][1]
    body = [s for q in qtypes if (s := q.sentence(facts, values[q.name]))]
    for filler in r.sample(FILLERS[domain], 2):
        body.insert(r.randint(0, len(body)), filler)
    return " ".join([intro, *body])


def _diff_span(answer: str, other: str) -> tuple[int, int]:
    """Character span of ``answer`` that differs from ``other``, widened to whole words."""
    p = 0
    while p < min(len(answer), len(other)) and answer[p] == other[p]:
        p += 1
    s = 0
    while s < min(len(answer), len(other)) - p and answer[-1 - s] == other[-1 - s]:
        s += 1
    start, end = p, len(answer) - s
    while start > 0 and answer[start - 1].isalnum():
        start -= 1
    while end < len(answer) and answer[end].isalnum():
        end += 1
    return (start, end) if end > start else (0, len(answer))


def _family(fam: int, r: random.Random, n_questions: int) -> list[Example]:
    domain = list(DOMAINS)[fam % len(DOMAINS)]
    make, qtypes = DOMAINS[domain]
    facts, intro = make(r)
    asked = r.sample(qtypes, n_questions)
    pairs = {q.name: q.draw(r, facts) for q in qtypes}
    # the two siblings differ only in the asked slots
    values = [{q.name: pairs[q.name][k if q in asked else 0] for q in qtypes} for k in (0, 1)]
    contexts = [_context(r, domain, intro, facts, values[k]) for k in (0, 1)]
    out = []
    for q in asked:
        phrasing = q.answers[r.randrange(len(q.answers))]
        answers = [phrasing(facts, values[k][q.name]) for k in (0, 1)]
        for ctx in (0, 1):
            for src in (0, 1):
                label = int(src != ctx)
                refusal = values[src][q.name] is None
                if label == 0:
                    kind = "refusal" if refusal else q.faithful_kind
                    spans: tuple[Span, ...] = ()
                else:
                    kind = "false_refusal" if refusal else q.hallucinated_kind
                    spans = (Span(*_diff_span(answers[src], answers[ctx]), kind),)
                out.append(Example(
                    id=f"default-{fam:03d}-{'ab'[ctx]}-{q.name}-{'fh'[label]}",
                    source="default", context=contexts[ctx], question=q.question(facts), answer=answers[src],
                    label=label, group=f"default-{fam:03d}", spans=spans,
                    meta={"kind": kind, "qtype": q.name, "domain": domain,
                          "context_id": f"{fam:03d}{'ab'[ctx]}"},
                ))  # fmt: skip
    return out


def fewest_contexts() -> int:
    """The smallest ``n_contexts`` whose 70/15/15 group split gives every split at least one family.

    Families are alike in size and labels, so the answer depends on neither the seed nor the questions
    per context; `build_default` with fewer contexts leaves the validation or test split empty.
    """
    families = 1
    while set(assign_splits([str(g) for g in range(families)]).values()) != set(SPLITS):
        families += 1
    return 2 * families


def build_default(seed: int = 42, n_contexts: int = 100, questions_per_context: int = 3) -> Dataset:
    """Generate the default dataset deterministically (no download).

    Args:
        seed: seed of the generator and of the 70/15/15 group split.
        n_contexts: number of contexts (even; two sibling contexts per family and group). Below
            `fewest_contexts` (12) the validation or test split is empty.
        questions_per_context: questions per context (1 to 7); each question gives two faithful and
            two hallucinated examples per family.

    Returns:
        ``6 * n_contexts`` examples with the default settings' 3 questions (600 for 100 contexts),
        half hallucinated, source ``"default"``, splits set, ``meta["kind"]`` recorded.
    """
    if n_contexts < 2 or n_contexts % 2:
        raise ValueError(f"n_contexts must be an even number >= 2, got {n_contexts}")
    if not 1 <= questions_per_context <= 7:
        raise ValueError(f"questions_per_context must be in 1..7, got {questions_per_context}")
    r = random.Random(seed)
    examples = [ex for fam in range(n_contexts // 2) for ex in _family(fam, r, questions_per_context)]
    splits = assign_splits([e.group for e in examples], [(e.source, e.label) for e in examples], seed=seed)
    ds = Dataset(tuple(examples), "default").with_splits(splits)
    report = LoadReport(f"default(seed={seed}, n_contexts={n_contexts})", len(ds), len(ds))
    return Dataset(ds.examples, "default", report)
