// Structured outputs through the official `openai` npm client against a running tachyon server
// (a tiny random-weight model: only the grammar makes its output JSON). response_format
// json_schema (whole and streamed, n = 2), json_object, vLLM's guided_choice and guided_regex as
// extra body fields, and a schema with an unsupported keyword surfacing as BadRequestError
// naming it. Every completion that ends with finish_reason "stop" must parse and match its schema.
//   node tests/server/openai_structured_client.cjs http://127.0.0.1:PORT/v1 MODEL
const assert = require('node:assert/strict');
const { OpenAI } = require('openai');

const schema = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 6 },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    color: { enum: ['red', 'green', 'blue'] },
    tags: { type: 'array', items: { type: 'boolean' }, maxItems: 2 },
  },
  required: ['name', 'color', 'tags'],
  additionalProperties: false,
};

function checkPerson(text) {
  const value = JSON.parse(text);
  assert.deepEqual(Object.keys(value).filter((k) => !['name', 'age', 'color', 'tags'].includes(k)), []);
  assert.equal(typeof value.name, 'string');
  assert.ok([...value.name].length <= 6, text);
  if ('age' in value) assert.ok(Number.isInteger(value.age) && value.age >= 0 && value.age <= 120, text);
  assert.ok(['red', 'green', 'blue'].includes(value.color), text);
  assert.ok(Array.isArray(value.tags) && value.tags.length <= 2 && value.tags.every((t) => typeof t === 'boolean'), text);
}

async function main() {
  const [baseURL, model] = process.argv.slice(2);
  const client = new OpenAI({ baseURL, apiKey: 'test-key', maxRetries: 0 });
  const messages = [{ role: 'user', content: 'Describe a person as JSON.' }];
  const common = { model, messages, max_completion_tokens: 60, chat_template_kwargs: { enable_thinking: false } };
  const response_format = { type: 'json_schema', json_schema: { name: 'person', schema, strict: true } };
  let stopped = 0;

  const whole = await client.chat.completions.create({ ...common, response_format, n: 2, seed: 5 });
  assert.equal(whole.choices.length, 2);
  for (const choice of whole.choices) {
    if (choice.finish_reason !== 'stop') continue;
    checkPerson(choice.message.content);
    stopped++;
  }

  let streamed = '';
  let finish = null;
  for await (const chunk of await client.chat.completions.create({ ...common, response_format, seed: 6, stream: true })) {
    for (const choice of chunk.choices) {
      if (choice.delta.content) streamed += choice.delta.content;
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  if (finish === 'stop') {
    checkPerson(streamed);
    stopped++;
  }
  assert.ok(stopped >= 2, `only ${stopped} of 3 schema completions ended by EOS`);

  const object = await client.chat.completions.create({ ...common, response_format: { type: 'json_object' }, temperature: 0, max_completion_tokens: 30 });
  const content = object.choices[0].message.content;
  assert.ok(content.startsWith('{'), content);
  if (object.choices[0].finish_reason === 'stop') assert.equal(typeof JSON.parse(content), 'object');

  const choice = await client.chat.completions.create({ ...common, guided_choice: ['yes', 'no', 'maybe'] });
  assert.equal(choice.choices[0].finish_reason, 'stop');
  assert.ok(['yes', 'no', 'maybe'].includes(choice.choices[0].message.content), choice.choices[0].message.content);

  const completion = await client.completions.create({ model, prompt: 'Code:', max_tokens: 12, guided_regex: '[0-9]{3}-[A-Z]{2}' });
  assert.equal(completion.choices[0].finish_reason, 'stop');
  assert.match(completion.choices[0].text, /^[0-9]{3}-[A-Z]{2}$/);

  await assert.rejects(
    client.chat.completions.create({ ...common, response_format: { type: 'json_schema', json_schema: { name: 'bad', schema: { type: 'integer', multipleOf: 0.5 } } } }),
    (error) => error instanceof OpenAI.BadRequestError && error.status === 400 && /'multipleOf'/.test(error.message),
  );
  console.log(`openai structured outputs: ok (${stopped} of 3 schema completions ended by EOS)`);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
