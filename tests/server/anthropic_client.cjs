// The official Anthropic npm client against a running tachyon server's /v1/messages: a whole
// message, a streamed one through the client's accumulator (finalMessage) whose text equals the
// whole one at temperature 0, a 400 surfacing as the client's BadRequestError, a request
// with tools that comes back as a well-formed message, a prefill (a final assistant message)
// continued, a forced call the engine gives up on raising the reason, streamed or not, and
// countTokens giving the whole message's input tokens.
//   node tests/server/anthropic_client.cjs http://127.0.0.1:PORT/v1 MODEL
const assert = require('node:assert/strict');
const sdk = require('@anthropic-ai/sdk');
const Anthropic = sdk.Anthropic || sdk.default;

function textOf(message) {
  return message.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
}

function checkMessage(message, model) {
  assert.equal(message.type, 'message');
  assert.equal(message.role, 'assistant');
  assert.equal(message.model, model);
  assert.match(message.id, /^msg_/);
  assert.ok(Array.isArray(message.content));
  assert.ok(['end_turn', 'max_tokens', 'stop_sequence', 'tool_use'].includes(message.stop_reason), message.stop_reason);
  assert.ok(message.usage.input_tokens > 0);
  assert.ok(message.usage.output_tokens > 0);
  for (const block of message.content) assert.ok(['text', 'thinking', 'tool_use'].includes(block.type), block.type);
}

async function main() {
  const [url, model] = process.argv.slice(2);
  const client = new Anthropic({ baseURL: url.replace(/\/v1$/, ''), apiKey: 'test-key', maxRetries: 0 });
  let checks = 0;

  const params = {
    model,
    max_tokens: 12,
    temperature: 0,
    system: 'You are terse.',
    messages: [{ role: 'user', content: 'Say hello' }],
    thinking: { type: 'disabled' },
  };
  const whole = await client.messages.create(params);
  checkMessage(whole, model);
  checks++;

  const stream = client.messages.stream(params);
  let deltas = '';
  stream.on('text', (text) => { deltas += text; });
  const final = await stream.finalMessage();
  checkMessage(final, model);
  assert.equal(textOf(final), textOf(whole));
  assert.equal(deltas, textOf(whole));
  assert.equal(final.stop_reason, whole.stop_reason);
  assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
  checks++;

  await assert.rejects(client.messages.create({ ...params, max_tokens: 0 }), (e) => {
    assert.ok(e instanceof Anthropic.BadRequestError, String(e));
    assert.equal(e.status, 400);
    assert.equal(e.error.type, 'error');
    assert.equal(e.error.error.type, 'invalid_request_error');
    return true;
  });
  await assert.rejects(
    client.messages.create({ ...params, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AA==' } }] }] }),
    (e) => e instanceof Anthropic.BadRequestError && /image/.test(e.message));
  checks++;

  const tools = [{
    name: 'get_weather',
    description: 'Weather of a city',
    input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  }];
  const withTools = await client.messages.create({ ...params, tools, tool_choice: { type: 'auto' } });
  checkMessage(withTools, model);
  for (const block of withTools.content) {
    if (block.type === 'tool_use') {
      assert.match(block.id, /^toolu_/);
      assert.equal(typeof block.input, 'object');
    }
  }
  const streamedTools = await client.messages.stream({ ...params, tools }).finalMessage();
  checkMessage(streamedTools, model);
  assert.equal(textOf(streamedTools), textOf(withTools));
  assert.equal(streamedTools.stop_reason, withTools.stop_reason);
  checks++;

  // Forced calls: tool_choice any and tool decode under the tool-call grammar, so even a random
  // model answers with exactly one valid tool_use block (thinking off: the call comes first).
  const bounded = [{ ...tools[0], input_schema: { type: 'object', properties: { city: { type: 'string', maxLength: 8 } }, required: ['city'] } }];
  for (const tool_choice of [{ type: 'any', disable_parallel_tool_use: true }, { type: 'tool', name: 'get_weather' }]) {
    const forcedParams = { ...params, max_tokens: 100, temperature: 0, tools: bounded, tool_choice, thinking: { type: 'disabled' } };
    const forced = await client.messages.create(forcedParams);
    assert.equal(forced.stop_reason, 'tool_use', JSON.stringify(forced));
    const uses = forced.content.filter((b) => b.type === 'tool_use');
    assert.equal(uses.length, 1);
    assert.equal(uses[0].name, 'get_weather');
    assert.deepEqual(Object.keys(uses[0].input), ['city']);
    assert.ok(typeof uses[0].input.city === 'string' && [...uses[0].input.city].length <= 8);
    const streamedForced = await client.messages.stream(forcedParams).finalMessage();
    assert.deepEqual(streamedForced.content.filter((b) => b.type === 'tool_use').map((b) => [b.name, b.input]),
                     uses.map((b) => [b.name, b.input]));
  }
  checks++;

  // A final assistant message is a prefill the answer continues (streamed as whole); the client's
  // metadata.user_id is taken. Text ending in whitespace cannot be continued: a 400 naming it.
  const story = [{ role: 'user', content: 'Tell me a story' }, { role: 'assistant', content: 'Once upon a time' }];
  const prefillParams = { ...params, messages: story, metadata: { user_id: 'user-1' } };
  const continued = await client.messages.create(prefillParams);
  checkMessage(continued, model);
  const streamedContinued = await client.messages.stream(prefillParams).finalMessage();
  assert.equal(textOf(streamedContinued), textOf(continued));
  const spaced = [story[0], { role: 'assistant', content: 'Once upon ' }];
  await assert.rejects(client.messages.create({ ...prefillParams, messages: spaced }),
    (e) => e instanceof Anthropic.BadRequestError && /messages\.1\.content/.test(e.message));
  checks++;

  // A forced call whose schema the engine gives up on (an item is an `a` or a `b`, both arrays:
  // every '[' doubles the parses still open, past the parser's budget) raises the reason.
  const array = { type: 'array', items: { anyOf: [{ $ref: '#/$defs/a' }, { $ref: '#/$defs/b' }] }, minItems: 1 };
  const schema = { type: 'object', properties: { x: { $ref: '#/$defs/a' } }, required: ['x'], $defs: { a: array, b: array } };
  const gaveUp = { ...params, max_tokens: 64, tools: [{ name: 'f', input_schema: schema }], tool_choice: { type: 'tool', name: 'f' } };
  await assert.rejects(client.messages.create(gaveUp),
    (e) => e instanceof Anthropic.BadRequestError && /too ambiguous/.test(e.message));
  await assert.rejects(client.messages.stream(gaveUp).finalMessage(),
    (e) => e instanceof Anthropic.APIError && /too ambiguous/.test(e.message));
  checks++;

  // The client's token count equals the input tokens the same messages are answered with (those
  // the prefix cache served are counted apart, as Anthropic does).
  const { model: m, system, messages, thinking } = params;
  const counted = await client.messages.countTokens({ model: m, system, messages, thinking });
  assert.equal(counted.input_tokens, whole.usage.input_tokens + whole.usage.cache_read_input_tokens);
  checks++;

  console.log(`anthropic client: ${checks} checks passed`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
