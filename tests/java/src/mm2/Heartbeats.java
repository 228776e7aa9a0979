/*
 * MirrorMaker 2's own view of a cluster's heartbeats, driven by pytest:
 * `java Heartbeats <bootstrap> <upstream alias>[,<alias>...] <topic>...` prints one JSON line:
 * {"hops": {"<alias>": RemoteClusterUtils.replicationHops(<alias>), ...},
 *  "topics": [RemoteClusterUtils.heartbeatTopics()...],
 *  "heartbeats": [["<topic>", "<sourceClusterAlias>", "<targetClusterAlias>", <timestamp>], ...]}
 * where every record of the named topics is decoded by MM2's Heartbeat.deserializeRecord.
 */
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.connect.mirror.Heartbeat;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

public class Heartbeats {
    public static void main(String[] args) throws Exception {
        Map<String, Object> props = new HashMap<>();
        props.put("bootstrap.servers", args[0]);
        StringBuilder s = new StringBuilder("{\"hops\":{");
        boolean first = true;
        for (String alias : args[1].split(",")) {
            if (!first) s.append(',');
            first = false;
            s.append('"').append(alias).append("\":").append(RemoteClusterUtils.replicationHops(props, alias));
        }
        s.append("},\"topics\":[");
        first = true;
        for (String t : new TreeSet<>(RemoteClusterUtils.heartbeatTopics(props))) {
            if (!first) s.append(',');
            first = false;
            s.append('"').append(t).append('"');
        }
        s.append("],\"heartbeats\":[");
        Properties c = new Properties();
        c.put("bootstrap.servers", args[0]);
        c.put("key.deserializer", ByteArrayDeserializer.class.getName());
        c.put("value.deserializer", ByteArrayDeserializer.class.getName());
        first = true;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int i = 2; i < args.length; i++) tps.add(new TopicPartition(args[i], 0));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<TopicPartition, Long> end = consumer.endOffsets(tps);
            long deadline = System.currentTimeMillis() + 60_000;
            while (System.currentTimeMillis() < deadline) {
                boolean done = true;
                for (TopicPartition tp : tps) done &= consumer.position(tp) >= end.get(tp);
                if (done) break;
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    if (r.offset() >= end.get(new TopicPartition(r.topic(), r.partition()))) continue;
                    Heartbeat h = Heartbeat.deserializeRecord(r);
                    if (!first) s.append(',');
                    first = false;
                    s.append("[\"").append(r.topic()).append("\",\"").append(h.sourceClusterAlias()).append("\",\"")
                        .append(h.targetClusterAlias()).append("\",").append(h.timestamp()).append(']');
                }
            }
        }
        System.out.println(s.append("]}"));
    }
}
