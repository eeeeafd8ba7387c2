"""Constrained answers (serve's response_format and forced tool calls): a JSON schema as a grammar that every
level of the chain follows, on the real demo model. Greedy, the chain's answer is the target alone's; sampled,
the same seed gives the same tokens; every answer validates against its schema."""

from __future__ import annotations

import json

import jsonschema
import pytest

from assistant.engine.grammar import Grammar, GrammarError
from assistant.serve.schema_grammar import UnsupportedSchema, schema_grammar
from assistant.speculative import Pipeline, Sampling
from assistant.bench.schemas import SCHEMAS


@pytest.fixture(scope="module")
def demo_pipelines(imported_smollm2):
    """The demo set's default chain (target <- MXFP4 copy, with the n-gram level) and its target alone."""
    chain = Pipeline.load([imported_smollm2["bf16"], imported_smollm2["mxfp4"]], n_ctx=1024, threads=1, ngram=True)
    target = Pipeline.load([imported_smollm2["bf16"]], n_ctx=1024, threads=1)
    yield chain, target
    chain.close()
    target.close()


def ask(pipeline, what: str, grammar: str, sampling=Sampling()):
    messages = [{"role": "user", "content": f"Answer in JSON only: {what}."}]
    return pipeline.chat(messages, sampling, max_tokens=200, grammar=grammar).finish()


@pytest.mark.parametrize("what, schema", SCHEMAS, ids=[what for what, _ in SCHEMAS])
def test_the_chain_answers_every_schema_as_the_target_alone(demo_pipelines, what, schema):
    chain, target = demo_pipelines
    grammar = schema_grammar(schema)
    answer = ask(chain, what, grammar)
    assert answer.stats.stop_reason == "eos", answer.text
    jsonschema.validate(json.loads(answer.text), schema)
    assert answer.tokens == ask(target, what, grammar).tokens


@pytest.mark.parametrize("index, seed", [(11, 1), (19, 2)])
def test_sampled_constrained_answers_follow_the_seed_whatever_drafts(demo_pipelines, index, seed):
    chain, target = demo_pipelines
    what, schema = SCHEMAS[index]
    grammar = schema_grammar(schema)
    for top_p in (1.0, 0.9):  # top-p cuts the masked distribution: the whole vocabulary is masked there
        sampling = Sampling(temperature=0.8, top_p=top_p, seed=seed)
        answer = ask(chain, what, grammar, sampling)
        jsonschema.validate(json.loads(answer.text), schema)
        assert answer.tokens == ask(target, what, grammar, sampling).tokens


def accepts(model, grammar_text: str, text: str) -> bool:
    """Whether ``text`` (as the model tokenizes it), then the end of the answer, is a sentence of the grammar."""
    grammar = Grammar(model, grammar_text, 0, model.n_vocab)
    try:
        for position, token in enumerate(model.tokenize(text, add_special=False, parse_special=False)):
            if not grammar.allows(position, token):
                return False
            grammar.append(token)
        return grammar.allows(position + 1, model.eos_token)
    finally:
        grammar.close()


@pytest.mark.parametrize("schema, inside, outside", [
    ({"type": "integer", "minimum": -37, "maximum": 1234}, [-37, -9, 0, 7, 99, 100, 999, 1000, 1234],
     [-38, -100, 1235, 2000, 10000]),
    ({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}, [1, 5, 9], [0, 10, -1]),
    ({"type": "integer", "minimum": 5}, [5, 9, 10, 123456], [4, 0, -5]),
    ({"type": "integer", "maximum": -3}, [-3, -10, -99999], [-2, 0, 3]),
    ({"type": "number", "minimum": -50, "maximum": 60}, [-50, -49.5, 0.25, 59.99, 60], [-50.5, 60.5, 61, -51]),
])
def test_number_bounds_are_exact(demo_pipelines, schema, inside, outside):
    model = demo_pipelines[1].target
    grammar = schema_grammar(schema)
    for value in inside:
        assert accepts(model, grammar, json.dumps(value)), value
    for value in outside:
        assert not accepts(model, grammar, json.dumps(value)), value


def test_patterns_optional_properties_and_closed_objects(demo_pipelines):
    model = demo_pipelines[1].target
    commit = schema_grammar({"type": "string", "pattern": "^[0-9a-f]{7}$"})
    assert accepts(model, commit, '"abc1234"') and not accepts(model, commit, '"abc123"')
    assert not accepts(model, commit, '"ABC1234"')
    optional = schema_grammar({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}})
    for text in ("{}", '{"a": 1}', '{"b": 2}', '{"a": 1, "b": 2}'):
        assert accepts(model, optional, text), text
    for text in ('{"a": 1,}', '{, "b": 2}', '{"c": 3}', '{"a": 1 "b": 2}'):
        assert not accepts(model, optional, text), text


@pytest.mark.parametrize("schema, path", [
    ({"type": "integer", "multipleOf": 3}, "multipleOf"),
    ({"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}, "properties.tags.uniqueItems"),
    ({"not": {"type": "string"}}, "not"),
    ({"type": "number", "maximum": 2.5}, "maximum"),
    ({"$ref": "https://example.com/schema.json"}, "$ref"),
    ({"type": "string", "pattern": "(?=a)b"}, "pattern"),
])
def test_what_a_grammar_cannot_honour_is_refused_with_its_place(schema, path):
    with pytest.raises(UnsupportedSchema) as refused:
        schema_grammar(schema)
    assert refused.value.path == path


def test_a_grammar_llama_cpp_refuses_is_one_error(demo_pipelines):
    with pytest.raises(GrammarError, match="refused the grammar"):
        demo_pipelines[1].generate("Hello", grammar="root ::= undefined-rule", max_tokens=4)
