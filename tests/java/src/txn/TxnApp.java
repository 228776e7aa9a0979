/*
 * The Java client's consume-transform-produce application (tests/java/test_transactions.py), the same
 * loop and the same lines on stdout as tests/compat/txn_app.py:
 * `java TxnApp <bootstrap> <transactional.id> <group> <input> <output> <end> <control dir>
 *  <hold round> <abort round> <deadline s>`.
 * It reads partitions 0 and 1 of the input (read_committed, from the group's committed offsets),
 * writes "T:<value>" of each record to the same partition of the output and commits the input
 * offsets with sendOffsetsToTransaction, one transaction per poll, until its position is <end> on
 * both partitions. Prints READY (initTransactions returned), OPEN <round> (at <hold round>: records
 * flushed, the transaction open; it waits for the file <control dir>/go), ABORTED <round> <why>,
 * DONE <records> <aborted rounds>. Round <abort round> is aborted on purpose; after any abort the
 * input is read again from the group's committed offsets (a new consumer).
 * Compiled against kafka-clients 2.3.1 (sendOffsetsToTransaction(offsets, groupId)) and 4.x
 * (sendOffsetsToTransaction(offsets, consumer.groupMetadata())): the call is found by reflection.
 */
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class TxnApp {
    static final class Deliberate extends RuntimeException {
        Deliberate() { super("the round aborted on purpose"); }
    }

    static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static KafkaConsumer<byte[], byte[]> consumer(String bootstrap, String group, List<TopicPartition> tps) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        p.put("isolation.level", "read_committed");
        p.put("max.poll.records", "40");
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p);
        c.assign(tps);
        return c;
    }

    /** 2.3.1: sendOffsetsToTransaction(Map, String); 4.x: sendOffsetsToTransaction(Map, ConsumerGroupMetadata). */
    static void sendOffsets(KafkaProducer<byte[], byte[]> p, KafkaConsumer<byte[], byte[]> c,
                            Map<TopicPartition, OffsetAndMetadata> offsets, String group) {
        try {
            Method groupMetadata = null;
            try {
                groupMetadata = KafkaConsumer.class.getMethod("groupMetadata");
            } catch (NoSuchMethodException legacy) {
                KafkaProducer.class.getMethod("sendOffsetsToTransaction", Map.class, String.class).invoke(p, offsets, group);
                return;
            }
            Object meta = groupMetadata.invoke(c);
            KafkaProducer.class.getMethod("sendOffsetsToTransaction", Map.class, meta.getClass()).invoke(p, offsets, meta);
        } catch (InvocationTargetException e) {
            Throwable t = e.getCause();
            if (t instanceof RuntimeException) throw (RuntimeException) t;
            throw new IllegalStateException(t);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException(e);
        }
    }

    public static void main(String[] a) throws Exception {
        String bootstrap = a[0], txnId = a[1], group = a[2], input = a[3], output = a[4];
        long end = Long.parseLong(a[5]);
        Path go = Paths.get(a[6], "go");
        int holdRound = Integer.parseInt(a[7]), abortRound = Integer.parseInt(a[8]);
        long deadline = System.nanoTime() + Long.parseLong(a[9]) * 1_000_000_000L;

        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        pp.put("transactional.id", txnId);
        pp.put("linger.ms", "5");
        pp.put("key.serializer", ByteArraySerializer.class.getName());
        pp.put("value.serializer", ByteArraySerializer.class.getName());
        KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(pp);
        p.initTransactions();
        say("READY");

        List<TopicPartition> tps = Arrays.asList(new TopicPartition(input, 0), new TopicPartition(input, 1));
        KafkaConsumer<byte[], byte[]> c = consumer(bootstrap, group, tps);
        long[] pos = {-1, -1};
        int done = 0, rnd = 0, aborts = 0;
        byte[] prefix = "T:".getBytes(StandardCharsets.UTF_8);
        while (Math.min(pos[0], pos[1]) < end) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("deadline: transformed " + done + " records in " + rnd + " rounds");
            }
            ConsumerRecords<byte[], byte[]> records = c.poll(Duration.ofSeconds(1));
            if (records.isEmpty()) continue;
            rnd++;
            try {
                p.beginTransaction();
                int n = 0;
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    byte[] v = Arrays.copyOf(prefix, prefix.length + r.value().length);
                    System.arraycopy(r.value(), 0, v, prefix.length, r.value().length);
                    p.send(new ProducerRecord<>(output, r.partition(), null, v));
                    n++;
                }
                p.flush();
                if (rnd == holdRound) {
                    say("OPEN " + rnd);
                    while (!Files.exists(go)) {
                        if (System.nanoTime() > deadline) throw new IllegalStateException("never told to go on");
                        Thread.sleep(50);
                    }
                }
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (TopicPartition tp : tps) offsets.put(tp, new OffsetAndMetadata(c.position(tp)));
                sendOffsets(p, c, offsets, group);
                if (rnd == abortRound) throw new Deliberate();
                p.commitTransaction();
                done += n;
                for (TopicPartition tp : tps) pos[tp.partition()] = offsets.get(tp).offset();
            } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException fatal) {
                throw fatal;
            } catch (KafkaException | Deliberate e) {
                p.abortTransaction();
                aborts++;
                say("ABORTED " + rnd + " " + e);
                c.close();
                c = consumer(bootstrap, group, tps);
            }
        }
        c.close();
        p.close();
        say("DONE " + done + " " + aborts);
    }
}
