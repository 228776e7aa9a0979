/*
 * Kafka Streams word count, driven by pytest:
 * `java WordCount <bootstrap> <application.id> <input> <output> <state.dir> [<processing.guarantee>]`
 * (at_least_once unless named; with another guarantee the record cache is off, so every new count
 * of a word is written: the output shows each count once under exactly_once).
 * Lines of the input topic are split into words, re-keyed by word (a repartition topic), counted in a
 * state store (its changelog topic) and each new count written to the output topic (word -> long).
 * Prints {"state":"RUNNING"} etc. on each state change; exits on stdin's end.
 */
import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Produced;

public class WordCount {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        p.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        String guarantee = args.length > 5 ? args[5] : "at_least_once";
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        if (!guarantee.equals("at_least_once")) p.put("statestore.cache.max.bytes", "0");
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "500");
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, "3");
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        p.put("consumer.session.timeout.ms", "10000");
        p.put("consumer.heartbeat.interval.ms", "1000");
        p.put("consumer.auto.offset.reset", "earliest");
        StreamsBuilder b = new StreamsBuilder();
        b.<String, String>stream(args[2])
                .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\W+")))
                .filter((k, word) -> !word.isEmpty())
                .groupBy((k, word) -> word)
                .count()
                .toStream()
                .to(args[3], Produced.with(Serdes.String(), Serdes.Long()));
        KafkaStreams streams = new KafkaStreams(b.build(), p);
        streams.setStateListener((now, before) -> {
            System.out.println("{\"state\":\"" + now + "\"}");
            System.out.flush();
        });
        streams.start();
        while (System.in.read() != -1) { }
        streams.close();
    }
}
