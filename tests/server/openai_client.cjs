// The official `openai` npm client against a running tachyon server: chat and completions,
// streamed and not, at temperature 0 (streamed text must equal the whole text), usage, models,
// a 400 surfacing as the client's BadRequestError, and a request with tools and tool_choice
// (whole, streamed, and through the client's own stream accumulator).
//   node tests/server/openai_client.cjs http://127.0.0.1:PORT/v1 MODEL
const assert = require('node:assert/strict');
const { OpenAI } = require('openai');

async function main() {
  const [baseURL, model] = process.argv.slice(2);
  const client = new OpenAI({ baseURL, apiKey: 'test-key', maxRetries: 0 });
  let checks = 0;

  const models = await client.models.list();
  assert.equal(models.data[0].id, model);
  checks++;

  const params = { model, prompt: 'Once upon a time', max_tokens: 12, temperature: 0 };
  const whole = await client.completions.create(params);
  assert.equal(whole.object, 'text_completion');
  assert.equal(whole.choices.length, 1);
  assert.ok(whole.usage.completion_tokens > 0);
  let streamed = '';
  let finishes = 0;
  let usage = null;
  for await (const chunk of await client.completions.create({ ...params, stream: true, stream_options: { include_usage: true } })) {
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      streamed += choice.text;
      if (choice.finish_reason) finishes++;
    }
  }
  assert.equal(streamed, whole.choices[0].text);
  assert.equal(finishes, 1);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
  checks++;

  const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say something.' }];
  const chat = await client.chat.completions.create({ model, messages, max_completion_tokens: 10, temperature: 0 });
  assert.equal(chat.object, 'chat.completion');
  assert.equal(chat.choices[0].message.role, 'assistant');
  let chatStreamed = '';
  let role = null;
  for await (const chunk of await client.chat.completions.create({ model, messages, max_completion_tokens: 10, temperature: 0, stream: true })) {
    for (const choice of chunk.choices) {
      if (choice.delta.role) role = choice.delta.role;
      if (choice.delta.content) chatStreamed += choice.delta.content;
    }
  }
  assert.equal(role, 'assistant');
  assert.equal(chatStreamed, chat.choices[0].message.content);
  checks++;

  const withLogprobs = await client.chat.completions.create({ model, messages, max_tokens: 3, logprobs: true, top_logprobs: 2 });
  assert.equal(withLogprobs.choices[0].logprobs.content.length, withLogprobs.usage.completion_tokens);
  assert.equal(withLogprobs.choices[0].logprobs.content[0].top_logprobs.length, 2);
  checks++;

  const tools = [{
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Weather of a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  }];
  const toolMessages = [{ role: 'user', content: 'Weather in Paris?' }];
  const toolParams = { model, messages: toolMessages, tools, tool_choice: 'auto', max_completion_tokens: 8, temperature: 0 };
  const withTools = await client.chat.completions.create(toolParams);
  const message = withTools.choices[0].message;
  assert.equal(message.role, 'assistant');
  assert.ok(['stop', 'length', 'tool_calls'].includes(withTools.choices[0].finish_reason));
  if (message.tool_calls) {
    for (const call of message.tool_calls) JSON.parse(call.function.arguments);
  } else {
    assert.equal(typeof message.content, 'string');
  }
  const accumulated = await client.chat.completions.stream(toolParams).finalChatCompletion();
  assert.equal(accumulated.choices[0].message.content ?? '', message.content ?? '');
  assert.equal(accumulated.choices[0].finish_reason, withTools.choices[0].finish_reason);
  assert.deepEqual((accumulated.choices[0].message.tool_calls ?? []).map((c) => c.function),
                   (message.tool_calls ?? []).map((c) => c.function));
  const roundTrip = await client.chat.completions.create({
    model, tools, max_completion_tokens: 2,
    messages: [...toolMessages,
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '18 C, sunny' }],
  });
  assert.equal(roundTrip.choices[0].message.role, 'assistant');
  await assert.rejects(client.chat.completions.create({ ...toolParams, tool_choice: 'required', response_format: { type: 'json_object' } }), (err) => {
    assert.equal(err.status, 400);
    assert.equal(err.constructor.name, 'BadRequestError');
    assert.match(err.message, /cannot be combined/);
    return true;
  });
  await assert.rejects(
    client.chat.completions.create({ ...toolParams, tool_choice: { type: 'function', function: { name: 'get_time' } } }),
    (err) => err.status === 400 && /get_time/.test(err.message));
  checks++;

  // A generative model serves no embeddings: the client sees a BadRequestError saying why.
  await assert.rejects(client.embeddings.create({ model, input: 'hello' }), (err) => {
    assert.equal(err.status, 400);
    assert.equal(err.constructor.name, 'BadRequestError');
    assert.match(err.message, /pooling config/);
    return true;
  });
  checks++;

  await assert.rejects(client.completions.create({ model, prompt: 'x', top_p: 7 }), (err) => {
    assert.equal(err.status, 400);
    assert.equal(err.constructor.name, 'BadRequestError');
    assert.match(err.message, /top_p/);
    return true;
  });
  checks++;

  console.log(`openai client: ${checks} checks passed`);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
