// The official `openai` npm client's Responses API against a running tachyon server: a whole
// response and its output_text, the same request streamed through the client's own event
// accumulator (responses.stream: it checks event order, output indexes and item identities) whose
// text deltas and final response equal the whole one at temperature 0, output-text logprobs equal
// to the chat route's (whole and streamed), a forced function call
// and its output sent back as input items, a JSON-schema text format, a kept response continued by
// previous_response_id (the same answer as the conversation sent again), retrieved and deleted,
// and an unknown previous response surfacing as the client's BadRequestError.
//   node tests/server/openai_responses_client.cjs http://127.0.0.1:PORT/v1 MODEL
const assert = require('node:assert/strict');
const { OpenAI } = require('openai');

async function main() {
  const [baseURL, model] = process.argv.slice(2);
  const client = new OpenAI({ baseURL, apiKey: 'test-key', maxRetries: 0 });

  const params = { model, instructions: 'You are terse.', input: 'Tell me a story', max_output_tokens: 16, temperature: 0 };
  const whole = await client.responses.create(params);
  assert.equal(whole.object, 'response');
  assert.ok(whole.output_text.length > 0);
  assert.equal(whole.usage.output_tokens, 16);
  assert.equal(whole.status, 'incomplete');
  assert.equal(whole.incomplete_details.reason, 'max_output_tokens');

  let deltas = '';
  const stream = client.responses.stream(params);
  stream.on('response.output_text.delta', (event) => { deltas += event.delta; });
  const streamed = await stream.finalResponse();
  assert.equal(deltas, whole.output_text);
  assert.equal(streamed.output_text, whole.output_text);
  // The same usage but what the prefix cache served (the streamed run is the same prompt again).
  assert.deepEqual({ ...streamed.usage, input_tokens_details: null }, { ...whole.usage, input_tokens_details: null });
  assert.equal(whole.usage.input_tokens_details.cached_tokens, 0);
  assert.equal(streamed.usage.input_tokens_details.cached_tokens, Math.floor((whole.usage.input_tokens - 1) / 16) * 16);

  // Raw events through create({stream: true}): numbered from 0 in order.
  let expected = 0;
  let last = null;
  for await (const event of await client.responses.create({ ...params, stream: true })) {
    assert.equal(event.sequence_number, expected++);
    last = event;
  }
  assert.equal(last.type, 'response.incomplete');

  // Output-text logprobs: the chat route's for the same conversation, whole and streamed (the
  // deltas' entries concatenate to the part's).
  const withLogprobs = { ...params, include: ['message.output_text.logprobs'], top_logprobs: 2 };
  const scored = await client.responses.create(withLogprobs);
  const part = scored.output.find((item) => item.type === 'message').content[0];
  const chat = await client.chat.completions.create({
    model, max_tokens: 16, temperature: 0, logprobs: true, top_logprobs: 2,
    messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Tell me a story' }],
  });
  assert.equal(scored.output_text, chat.choices[0].message.content);
  assert.deepEqual(part.logprobs, chat.choices[0].logprobs.content);
  assert.equal(part.logprobs.length, 16);
  assert.equal(part.logprobs[0].top_logprobs.length, 2);
  const streamedEntries = [];
  const scoredStream = client.responses.stream(withLogprobs);
  scoredStream.on('response.output_text.delta', (event) => { streamedEntries.push(...event.logprobs); });
  await scoredStream.finalResponse();
  assert.deepEqual(streamedEntries, part.logprobs);

  const tools = [{
    type: 'function', name: 'get_weather', description: 'The weather in a city', strict: false,
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'] },
  }];
  const called = await client.responses.create({
    model, input: 'Weather in Paris?', tools, tool_choice: 'required', max_output_tokens: 200, temperature: 0,
  });
  const call = called.output.find((item) => item.type === 'function_call');
  assert.ok(call, JSON.stringify(called.output));
  assert.equal(call.name, 'get_weather');
  assert.equal(typeof JSON.parse(call.arguments).city, 'string');
  // Streamed: each call's argument deltas concatenate to its arguments in the whole response.
  const streamedArguments = new Map();
  const callStream = client.responses.stream({
    model, input: 'Weather in Paris?', tools, tool_choice: 'required', max_output_tokens: 200, temperature: 0,
  });
  callStream.on('response.function_call_arguments.delta', (event) => {
    streamedArguments.set(event.item_id, (streamedArguments.get(event.item_id) ?? '') + event.delta);
  });
  const streamedCalls = (await callStream.finalResponse()).output.filter((item) => item.type === 'function_call');
  const wholeCalls = called.output.filter((item) => item.type === 'function_call');
  assert.deepEqual(streamedCalls.map((c) => c.arguments), wholeCalls.map((c) => c.arguments));
  assert.deepEqual(streamedCalls.map((c) => streamedArguments.get(c.id)), wholeCalls.map((c) => c.arguments));
  const answered = await client.responses.create({
    model, tools, max_output_tokens: 8, temperature: 0,
    input: [
      { role: 'user', content: 'Weather in Paris?' },
      { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments },
      { type: 'function_call_output', call_id: call.call_id, output: 'Sunny, 21 C' },
    ],
  });
  assert.ok(answered.usage.input_tokens > called.usage.input_tokens);

  const structured = await client.responses.create({
    model, input: 'A city as JSON', max_output_tokens: 200, temperature: 0, reasoning: { effort: 'minimal' },
    text: { format: { type: 'json_schema', name: 'city', strict: true, schema: {
      type: 'object', properties: { name: { type: 'string', maxLength: 10 } }, required: ['name'], additionalProperties: false,
    } } },
  });
  assert.equal(typeof JSON.parse(structured.output_text).name, 'string');

  // A kept response continued by id, retrieved and deleted through the client.
  const next = await client.responses.create({ model, previous_response_id: whole.id, input: 'Go on', max_output_tokens: 8, temperature: 0 });
  const resent = await client.responses.create({
    model, max_output_tokens: 8, temperature: 0, store: false,
    input: [{ role: 'user', content: 'Tell me a story' }, ...whole.output, { role: 'user', content: 'Go on' }],
  });
  assert.equal(next.output_text, resent.output_text);
  // The same usage but what the prefix cache served: the resent conversation is the prompt just run.
  assert.deepEqual({ ...next.usage, input_tokens_details: null }, { ...resent.usage, input_tokens_details: null });
  assert.ok(resent.usage.input_tokens_details.cached_tokens > 0);
  // The input items of a kept response through the client's auto-paging list (pages of one).
  const listed = [];
  for await (const item of client.responses.inputItems.list(next.id, { order: 'asc', limit: 1 })) {
    listed.push(item);
  }
  assert.equal(listed.length, 1);
  assert.equal(listed[0].type, 'message');
  assert.equal(listed[0].role, 'user');
  assert.deepEqual(listed[0].content, [{ type: 'input_text', text: 'Go on' }]);
  const three = await client.responses.create({
    model, max_output_tokens: 2, input: [{ role: 'user', content: 'a' }, { role: 'user', content: 'b' }, { role: 'user', content: 'c' }],
  });
  const texts = [];
  for await (const item of client.responses.inputItems.list(three.id, { order: 'asc', limit: 1 })) texts.push(item.content[0].text);
  assert.deepEqual(texts, ['a', 'b', 'c']);
  const newest = await client.responses.inputItems.list(three.id);
  assert.deepEqual(newest.data.map((item) => item.content[0].text), ['c', 'b', 'a']);
  const retrieved = await client.responses.retrieve(whole.id);
  assert.equal(retrieved.id, whole.id);
  assert.equal(retrieved.output_text, whole.output_text);
  await client.responses.delete(whole.id);
  await assert.rejects(client.responses.retrieve(whole.id), (error) => error instanceof OpenAI.NotFoundError);
  await assert.rejects(
    client.responses.create({ model, input: 'hi', previous_response_id: 'resp_123' }),
    (error) => error instanceof OpenAI.BadRequestError && error.status === 400 && /resp_123/.test(error.message),
  );
  console.log('openai responses client: ok');
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
