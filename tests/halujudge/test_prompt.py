from pathlib import Path

import pytest
from halujudge import list_templates, load_template, render_messages

GOLDEN = Path(__file__).parent / "golden"


def test_four_templates_ship_as_data():
    assert list_templates() == ["claims", "plain", "strict", "strict_fewshot"]
    for name in list_templates():
        template = load_template(name)
        assert template.name == name
        assert "{context}" in template.user and "{response}" in template.user


def test_fewshot_has_four_hallucinated_and_four_faithful_demonstrations():
    template = load_template("strict_fewshot")
    labels = [d.label for d in template.demonstrations]
    assert sorted(labels) == [0, 0, 0, 0, 1, 1, 1, 1]
    system = render_messages(template, "c", "q", "a")[0]["content"]
    assert system.count("Answer: True (") == 4 and system.count("Answer: False (") == 4
    assert "{demonstrations}" not in system and "{verdict}" not in system
    # The strict template is the same rubric without the examples block.
    strict = render_messages(load_template("strict"), "c", "q", "a")[0]["content"]
    assert "Examples:" not in strict
    assert system.replace(system[system.index("Examples:") : system.index("Output format:")], "") == strict


@pytest.mark.parametrize("name", ["plain", "claims", "strict_fewshot"])
def test_rendering_matches_golden(name):
    messages = render_messages(
        load_template(name), "The bridge opened in 1932.", "When did the bridge open?", "In 1932."
    )
    rendered = "".join(f"<<{m['role']}>>\n{m['content']}\n" for m in messages)
    assert rendered == (GOLDEN / f"{name}.txt").read_text(encoding="utf-8")


def test_placeholders_inside_values_are_not_substituted_again():
    messages = render_messages(load_template("plain"), "ctx {question} {response}", "Q?", "ans {context}")
    user = messages[0]["content"]
    assert "ctx {question} {response}" in user and "ans {context}" in user
    assert len(messages) == 1  # the plain template has no system turn


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="unknown judge template 'nope'"):
        load_template("nope")
    with pytest.raises(TypeError, match="answer must be a str"):
        render_messages(load_template("plain"), "c", "q", None)
