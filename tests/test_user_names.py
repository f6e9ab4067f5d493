"""The normal form of user names (``actors/fairness/names.py``) and the user an LDAP entry
names (``web/ldap_identity.py``): pure functions, no directory needed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmpooler.actors.fairness.names import normal_user_name
from vmpooler.actors.fairness.quota_policy import QuotaPolicy, Requester
from vmpooler.web.ldap_identity import LdapEntry, entry_user


@pytest.mark.parametrize("typed", ["bob", "Bob", "BOB", " bob", "bob ", "ｂｏｂ", "\u3000BoB\t",
                                   "ＢＯＢ"])
def test_spellings_of_one_name_have_one_normal_form(typed: str) -> None:
    assert normal_user_name(typed) == "bob"


def test_inner_space_and_other_letters_are_kept() -> None:
    assert normal_user_name("Mary Ann") == "mary ann"
    assert normal_user_name("Straße") == "strasse"
    assert normal_user_name("   ") == ""


@given(st.text())
def test_the_normal_form_is_idempotent(name: str) -> None:
    once = normal_user_name(name)
    assert normal_user_name(once) == once


def test_the_policy_compares_any_spelling() -> None:
    policy = QuotaPolicy(users={"bob": {"vms_held": 1}}, members={"qa": frozenset({"bob"})},
                         high_priority_users=frozenset({"bob"}))
    asker = Requester("ＢＯＢ", policy.groups_of(" Bob"))
    assert asker.groups == {"qa"}
    assert policy.limits_for(asker).vms_held == 1
    assert policy.may_use_high(asker)


def test_the_entry_names_its_user() -> None:
    dn = "uid=Carol,ou=people,dc=example,dc=com"
    assert entry_user(LdapEntry(dn, ("cjones", "Carol")), "uid", "CJones") == ("carol", True)
    # the RDN is of another type: the smallest value, whichever was typed
    other = LdapEntry("cn=Carol Jones,ou=people,dc=example,dc=com", ("cjones", "carol"))
    assert entry_user(other, "uid", "cjones") == ("carol", True)
    assert entry_user(other, "uid", "CAROL") == ("carol", True)
    # an entry that could not be read: the typed name, in its normal form
    assert entry_user(LdapEntry(dn), "uid", " ＣＡＲＯＬ") == ("carol", False)
