"""New usernames that cannot pass for existing ones: normalised, one alphabet, no look-alike of a taken name.

Django's username rule allows any Unicode letter, so "ownеr" with a Cyrillic е was a second "owner" to
anyone reading the console, a chat export or the audit log. A new name is compared by its skeleton, in the
manner of Unicode's confusable detection (UTS #39): NFKC, accents dropped, the common Latin, Cyrillic and
Greek homoglyphs (and 0/O, 1/l/I, rn/m, vv/w) mapped onto one letter, case folded. Two names with one
skeleton look alike; the second is refused. A name mixing Latin, Cyrillic or Greek letters is refused
outright, as browsers refuse such domain names: it is how look-alikes of names not yet taken are made.
"""

# The look-alike letters are this module's subject: ruff's warnings about them would flag the table itself.
# ruff: noqa: RUF001, RUF002, RUF003

from __future__ import annotations

import unicodedata

from django.contrib.auth.models import User

# One character that passes for another, onto the Latin letter (or digit) it passes for. Upper case is
# mapped apart from lower case where the two look different (Cyrillic Н is H, н is h; Greek Η is H, η n).
_HOMOGLYPHS = {
    # Cyrillic
    "а": "a", "А": "a", "в": "b", "В": "b", "Ь": "b", "ь": "b", "с": "c", "С": "c", "ԁ": "d", "е": "e",
    "Е": "e", "ҽ": "e", "г": "r", "һ": "h", "Н": "h", "н": "h", "і": "i", "І": "l", "Ӏ": "l", "ӏ": "l",
    "ј": "j", "Ј": "j", "к": "k", "К": "k", "м": "m", "М": "m", "п": "n", "о": "o", "О": "o", "р": "p",
    "Р": "p", "ԛ": "q", "Ԛ": "q", "ѕ": "s", "Ѕ": "s", "т": "t", "Т": "t", "у": "y", "У": "y", "ԝ": "w",
    "Ԝ": "w", "х": "x", "Х": "x", "з": "3", "З": "3", "б": "6",
    # Greek
    "α": "a", "Α": "a", "β": "b", "Β": "b", "Ε": "e", "Η": "h", "η": "n", "ι": "i", "Ι": "l", "κ": "k",
    "Κ": "k", "Μ": "m", "Ν": "n", "ν": "v", "ο": "o", "Ο": "o", "ρ": "p", "Ρ": "p", "τ": "t", "Τ": "t",
    "υ": "u", "μ": "u", "Υ": "y", "γ": "y", "χ": "x", "Χ": "x", "ω": "w", "Ζ": "z",
    # Latin and digits
    "0": "o", "1": "l", "I": "l", "ı": "i", "ȷ": "j", "ɡ": "g", "ɑ": "a",
}  # fmt: skip
# Letter pairs that read as one letter, compared after case folding.
_DIGRAPHS = (("rn", "m"), ("vv", "w"))
# The scripts whose letters pass for each other; a name may use letters of one of them.
_CONFUSABLE_SCRIPTS = ("LATIN", "CYRILLIC", "GREEK")


def normalize(username: str) -> str:
    """NFKC, as Django normalises a username when it saves one: the form the name is checked in."""
    return unicodedata.normalize("NFKC", username).strip()


def skeleton(username: str) -> str:
    """What `username` looks like: two names with one skeleton are taken for one another."""
    decomposed = unicodedata.normalize("NFD", normalize(username))
    # Accents and invisible characters (zero-width joiners, bidi marks) do not tell names apart.
    bare = "".join(
        ch for ch in decomposed if not unicodedata.combining(ch) and unicodedata.category(ch) != "Cf"
    )
    folded = "".join(_HOMOGLYPHS.get(ch, ch) for ch in bare).casefold()
    for pair, letter in _DIGRAPHS:
        folded = folded.replace(pair, letter)
    return folded


def scripts_of(username: str) -> list[str]:
    """The look-alike scripts (Latin, Cyrillic, Greek) whose letters `username` uses, in order."""
    found: list[str] = []
    for ch in normalize(username):
        if not unicodedata.category(ch).startswith("L"):
            continue
        script = unicodedata.name(ch, "").split(" ", 1)[0]
        if script in _CONFUSABLE_SCRIPTS and script not in found:
            found.append(script)
    return found


def lookalike_of(username: str) -> str | None:
    """An existing username that `username` is, or passes for; None when it is free."""
    name = normalize(username)
    exact = User.objects.filter(username__iexact=name).values_list("username", flat=True).first()
    if exact is not None:
        return exact
    wanted = skeleton(name)
    # Skeletons are not stored: every name is read, fine for the accounts of one self-hosted server.
    for existing in User.objects.values_list("username", flat=True).iterator():
        if skeleton(existing) == wanted:
            return existing
    return None


def new_username_problem(username: str) -> str | None:
    """Why `username` may not be given to a new account, in users' words; None when it may."""
    scripts = scripts_of(username)
    if len(scripts) > 1:
        names = " and ".join(s.capitalize() for s in scripts)
        return f"That username mixes {names} letters. Please use letters of one alphabet."
    taken = lookalike_of(username)
    if taken is None:
        return None
    if taken.casefold() == normalize(username).casefold():
        return "That username is taken. Please choose another."
    return "That username looks too much like one that is taken. Please choose another."
