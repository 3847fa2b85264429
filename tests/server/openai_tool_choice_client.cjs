// Forced tool calls through the official `openai` npm client against a running tachyon server
// (a tiny random-weight model: only the tool-call grammar makes its answer a call). tool_choice
// "required" (one call, and parallel calls) and a named function, whole, streamed chunk by chunk
// and through the client's stream accumulator: every answer is calls only, finish_reason
// "tool_calls", each call's arguments parse and validate against its tool's parameters, and the
// streamed calls equal the whole ones. The server's chat template decides the format (Qwen3's
// Hermes blocks by default; MODEL_TOKENIZER picks another in run_with_server.sh).
//   node tests/server/openai_tool_choice_client.cjs http://127.0.0.1:PORT/v1 MODEL
const assert = require('node:assert/strict');
const { OpenAI } = require('openai');

const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Weather of a city',
      parameters: {
        type: 'object',
        properties: {
          city: { type: 'string', maxLength: 10 },
          unit: { enum: ['celsius', 'fahrenheit'] },
          detailed: { type: 'boolean' },
        },
        required: ['city', 'unit'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'get_time',
      description: 'Time in a zone',
      parameters: { type: 'object', properties: { zone: { enum: ['UTC', 'CET'] } }, required: ['zone'] },
    },
  },
];

// The arguments' JSON text against the tool's schema (the keywords used above).
function validate(call) {
  const tool = tools.find((t) => t.function.name === call.name);
  assert.ok(tool, `unknown tool ${call.name}`);
  const schema = tool.function.parameters;
  const args = JSON.parse(call.arguments);
  assert.equal(typeof args, 'object');
  for (const key of Object.keys(args)) assert.ok(key in schema.properties, `extra key ${key} in ${call.arguments}`);
  for (const key of schema.required) assert.ok(key in args, `missing ${key} in ${call.arguments}`);
  for (const [key, value] of Object.entries(args)) {
    const s = schema.properties[key];
    if (s.enum) assert.ok(s.enum.includes(value), call.arguments);
    if (s.type === 'string') assert.ok(typeof value === 'string' && [...value].length <= s.maxLength, call.arguments);
    if (s.type === 'boolean') assert.equal(typeof value, 'boolean');
  }
}

async function streamedCalls(client, params) {
  const calls = [];
  let finish = null;
  let content = '';
  for await (const chunk of await client.chat.completions.create({ ...params, stream: true })) {
    for (const choice of chunk.choices) {
      if (choice.finish_reason) finish = choice.finish_reason;
      if (choice.delta.content) content += choice.delta.content;
      for (const delta of choice.delta.tool_calls ?? []) {
        if (delta.id) calls[delta.index] = { name: delta.function.name, arguments: '' };
        calls[delta.index].arguments += delta.function.arguments ?? '';
      }
    }
  }
  return { calls, finish, content };
}

async function main() {
  const [baseURL, model] = process.argv.slice(2);
  const client = new OpenAI({ baseURL, apiKey: 'test-key', maxRetries: 0 });
  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const common = { model, messages, tools, temperature: 0, max_completion_tokens: 120,
                   chat_template_kwargs: { enable_thinking: false } };
  let checks = 0;

  for (const [tool_choice, parallel_tool_calls, name] of [['required', false, null],
                                                           [{ type: 'function', function: { name: 'get_time' } }, true, 'get_time'],
                                                           [{ type: 'function', function: { name: 'get_weather' } }, true, 'get_weather']]) {
    const params = { ...common, tool_choice, parallel_tool_calls };
    const whole = await client.chat.completions.create(params);
    const choice = whole.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(whole));
    assert.equal(choice.message.content ?? '', '');
    assert.equal(choice.message.tool_calls.length, 1, 'one call: no parallel calls, or a named function');
    const calls = choice.message.tool_calls.map((c) => c.function);
    for (const call of calls) validate(call);
    if (name) assert.equal(calls[0].name, name);
    const streamed = await streamedCalls(client, params);
    assert.equal(streamed.finish, 'tool_calls');
    assert.equal(streamed.content, '');
    assert.deepEqual(streamed.calls, calls);
    const accumulated = await client.chat.completions.stream(params).finalChatCompletion();
    assert.deepEqual(accumulated.choices[0].message.tool_calls.map((c) => c.function), calls);
    checks++;
  }

  // "required" with parallel calls: one call or more, each complete call valid. A random model
  // may go on calling until max_tokens; the call it was cut in is the only one that may be partial.
  const parallel = await client.chat.completions.create({ ...common, tool_choice: 'required', seed: 1, temperature: 1 });
  const choice = parallel.choices[0];
  assert.ok(choice.message.tool_calls.length >= 1);
  const complete = choice.finish_reason === 'length' ? choice.message.tool_calls.slice(0, -1) : choice.message.tool_calls;
  if (choice.finish_reason !== 'length') assert.equal(choice.finish_reason, 'tool_calls');
  for (const call of complete) validate(call.function);
  checks++;

  console.log(`openai tool_choice client: ${checks} checks passed`);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
