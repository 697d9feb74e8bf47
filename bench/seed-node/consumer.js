// The seed's own consumer (../shared/seed, "Dedup в eachMessage"), as its
// listener is written: kafkajs with its defaults plus what the listener
// sets (autoCommit: false, partitionsConsumedConcurrently: 3), zod for the
// payload, one TypeORM transaction per event with the processed_event
// insert `orIgnore()` (RETURNING tells a duplicate apart), the charge in
// the same transaction, and commitOffsets after it. With SEED_CHARGE_URL
// set, the charge also POSTs to the provider with Idempotency-Key =
// eventId (axios, as the seed's PaymentClient). Only the wiring (env, no
// NestJS container) is this benchmark's.
//
// Environment: SEED_BROKERS, SEED_DATABASE_URL, SEED_TOPIC, SEED_GROUP,
// SEED_CHARGE_URL (optional). It runs until it is killed.
'use strict';
require('reflect-metadata');
const { DataSource, EntitySchema } = require('typeorm');
const { Kafka, logLevel } = require('kafkajs');
const { z } = require('zod');
const axios = require('axios');

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};

const ProcessedEvent = new EntitySchema({
  name: 'ProcessedEvent',
  tableName: 'processed_event',
  schema: 'seed',
  columns: {
    eventId: { type: 'uuid', primary: true, name: 'event_id' },
    consumerGroup: { type: 'text', primary: true, name: 'consumer_group' },
    processedAt: { type: 'timestamptz', name: 'processed_at', default: () => 'now()' },
  },
});

const Charge = new EntitySchema({
  name: 'Charge',
  tableName: 'charge',
  schema: 'billing',
  columns: {
    eventId: { type: 'uuid', primary: true, name: 'event_id' },
    orderId: { type: 'bigint', name: 'order_id' },
    customerId: { type: 'bigint', name: 'customer_id' },
    amount: { type: 'numeric', name: 'amount' },
    currency: { type: 'char', name: 'currency' },
  },
});

const orderConfirmedSchema = z.object({
  eventId: z.string().uuid(),
  eventType: z.literal('order.confirmed.v1'),
  occurredAt: z.string().datetime(),
  orderId: z.number().int().positive(),
  customerId: z.number().int().positive(),
  totalAmount: z.number().positive(),
  currency: z.string().length(3),
});

async function main() {
  const group = env('SEED_GROUP');
  const chargeUrl = process.env.SEED_CHARGE_URL;
  const dataSource = new DataSource({ type: 'postgres', url: env('SEED_DATABASE_URL'), entities: [ProcessedEvent, Charge] });
  await dataSource.initialize();
  const http = chargeUrl ? axios.create({ baseURL: chargeUrl }) : null;

  const chargeOrder = async (manager, event) => {
    await manager.getRepository(Charge).insert({
      eventId: event.eventId,
      orderId: event.orderId,
      customerId: event.customerId,
      amount: event.totalAmount,
      currency: event.currency,
    });
    if (http) {
      await http.post(
        '/v1/charges',
        { orderId: event.orderId, amount: event.totalAmount, currency: event.currency },
        { headers: { 'Idempotency-Key': event.eventId } },
      );
    }
  };

  const kafka = new Kafka({ clientId: 'seed-billing', brokers: env('SEED_BROKERS').split(','), logLevel: logLevel.ERROR });
  const consumer = kafka.consumer({ groupId: group });
  await consumer.connect();
  await consumer.subscribe({ topic: env('SEED_TOPIC'), fromBeginning: true });
  await consumer.run({
    autoCommit: false,
    partitionsConsumedConcurrently: 3,
    eachMessage: async ({ topic, partition, message }) => {
      const event = orderConfirmedSchema.parse(JSON.parse(message.value.toString()));
      await dataSource.transaction(async (manager) => {
        const result = await manager
          .createQueryBuilder()
          .insert()
          .into(ProcessedEvent)
          .values({ eventId: event.eventId, consumerGroup: group })
          .orIgnore()
          .returning('event_id')
          .execute();
        if (!result.raw.length) {
          return;
        }
        await chargeOrder(manager, event);
      });
      await consumer.commitOffsets([{ topic, partition, offset: String(Number(message.offset) + 1) }]);
    },
  });
  const stop = async () => {
    await consumer.disconnect().catch(() => {});
    await dataSource.destroy().catch(() => {});
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((e) => {
  console.error(`seed consumer: ${e.stack || e}`);
  process.exit(1);
});
