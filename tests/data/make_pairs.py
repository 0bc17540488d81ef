"""Write ``en-fr.tsv``: English sentences and their French translations, generated from a small grammar.

    python tests/data/make_pairs.py      # rewrites tests/data/en-fr.tsv (seeded: the same file every time)

A translation task with what makes translation more than a word-for-word lookup: French nouns have gender, and
articles, adjectives and verbs agree with them in gender and number; colour adjectives move after the noun
while size and age adjectives stay before it; negation wraps the verb (``ne ... pas``) and elides before a
vowel (``n'aime``). Every sentence is correct French for its English; the vocabulary is small enough for a
CPU model to learn in minutes.
"""

from __future__ import annotations

import random
from pathlib import Path

NOUNS = [  # english singular, english plural, french singular, french plural, gender
    ("cat", "cats", "chat", "chats", "m"), ("dog", "dogs", "chien", "chiens", "m"),
    ("girl", "girls", "fille", "filles", "f"), ("boy", "boys", "garçon", "garçons", "m"),
    ("house", "houses", "maison", "maisons", "f"), ("car", "cars", "voiture", "voitures", "f"),
    ("bird", "birds", "oiseau", "oiseaux", "m"), ("apple", "apples", "pomme", "pommes", "f"),
    ("book", "books", "livre", "livres", "m"), ("teacher", "teachers", "professeur", "professeurs", "m"),
    ("flower", "flowers", "fleur", "fleurs", "f"), ("friend", "friends", "ami", "amis", "m"),
]
ADJECTIVES = [  # english, french (m sg, f sg, m pl, f pl), before the noun?
    ("big", ("grand", "grande", "grands", "grandes"), True),
    ("small", ("petit", "petite", "petits", "petites"), True),
    ("young", ("jeune", "jeune", "jeunes", "jeunes"), True),
    ("old", ("vieux", "vieille", "vieux", "vieilles"), True),
    ("black", ("noir", "noire", "noirs", "noires"), False),
    ("green", ("vert", "verte", "verts", "vertes"), False),
    ("white", ("blanc", "blanche", "blancs", "blanches"), False),
    ("happy", ("heureux", "heureuse", "heureux", "heureuses"), False),
]
VERBS = [  # english 3rd singular, english plural, french 3rd singular, french 3rd plural
    ("sees", "see", "voit", "voient"), ("likes", "like", "aime", "aiment"), ("finds", "find", "trouve", "trouvent"),
    ("watches", "watch", "regarde", "regardent"), ("wants", "want", "veut", "veulent"),
    ("loves", "love", "adore", "adorent"), ("has", "have", "a", "ont"),
]


def noun_phrase(rng: random.Random) -> tuple[str, str, bool]:
    """(english, french, plural) of 'the [adjective] noun'."""
    en_sg, en_pl, fr_sg, fr_pl, gender = rng.choice(NOUNS)
    plural = rng.random() < 0.4
    english, french = (en_pl, fr_pl) if plural else (en_sg, fr_sg)
    article = "les" if plural else ("la" if gender == "f" else "le")
    words_en, words_fr = ["the"], [article]
    if rng.random() < 0.6:
        adjective, forms, before = rng.choice(ADJECTIVES)
        form = forms[(2 if plural else 0) + (gender == "f")]
        if form == "vieux" and not plural and french[0] in "aeiouhé":  # le vieil ami
            form = "vieil"
        words_en.append(adjective)
        words_fr = words_fr + [form, french] if before else words_fr + [french, form]
    else:
        words_fr.append(french)
    words_en.append(english)
    fr = " ".join(words_fr)
    if not plural and fr.split()[1][0] in "aeiouhé":  # l'ami, l'oiseau, l'heureux
        fr = "l'" + fr.split(" ", 1)[1]
    return " ".join(words_en), fr, plural


def sentence(rng: random.Random) -> tuple[str, str]:
    subject_en, subject_fr, plural = noun_phrase(rng)
    object_en, object_fr, _ = noun_phrase(rng)
    en_sg, en_pl, fr_sg, fr_pl = rng.choice(VERBS)
    verb_fr = fr_pl if plural else fr_sg
    if rng.random() < 0.25:
        english = f"{subject_en} {'do' if plural else 'does'} not {en_pl} {object_en}"
        negated = ("n'" if verb_fr[0] in "aeioué" else "ne ") + verb_fr
        french = f"{subject_fr} {negated} pas {object_fr}"
    else:
        english = f"{subject_en} {en_pl if plural else en_sg} {object_en}"
        french = f"{subject_fr} {verb_fr} {object_fr}"
    return english + " .", french + " ."


def pairs(count: int, seed: int = 0) -> list[tuple[str, str]]:
    rng, seen, out = random.Random(seed), set(), []
    while len(out) < count:
        pair = sentence(rng)
        if pair[0] not in seen:
            seen.add(pair[0])
            out.append(pair)
    return out


if __name__ == "__main__":
    path = Path(__file__).with_name("en-fr.tsv")
    path.write_text("".join(f"{en}\t{fr}\n" for en, fr in pairs(4000)), encoding="utf-8")
    print(f"wrote {path}")
