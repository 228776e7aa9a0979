/*
 * MirrorMaker 2's RemoteClusterUtils.translateOffsets, driven by pytest:
 * `java Translate <target bootstrap> <source alias> <group>` prints {"<topic>-<partition>": offset, ...},
 * the group's committed offsets on the source translated into the target cluster's remote topics
 * (from MM2's checkpoints there).
 */
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;

import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

public class Translate {
    public static void main(String[] args) throws Exception {
        Map<String, Object> props = new HashMap<>();
        props.put("bootstrap.servers", args[0]);
        Map<TopicPartition, OffsetAndMetadata> out = RemoteClusterUtils.translateOffsets(props, args[1], args[2], Duration.ofSeconds(30));
        StringBuilder s = new StringBuilder("{");
        for (Map.Entry<String, Long> e : sorted(out).entrySet()) {
            if (s.length() > 1) s.append(',');
            s.append('"').append(e.getKey()).append("\":").append(e.getValue());
        }
        System.out.println(s.append('}'));
    }

    static Map<String, Long> sorted(Map<TopicPartition, OffsetAndMetadata> m) {
        Map<String, Long> out = new TreeMap<>();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : m.entrySet()) out.put(e.getKey().toString(), e.getValue().offset());
        return out;
    }
}
